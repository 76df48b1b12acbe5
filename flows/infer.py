"""infer: run one policy (base, sft, grpo or the teacher) on the test split.

A model policy's queries are cut into chunks, each one Prefect task under the task
runner that params choose (flows/fanout.py): one chunk by default, so the model
loads once; on a Ray or Dask cluster, chunks play on its nodes. A finished chunk
is persisted, so an interrupted stage resumes from it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefect import flow

from flows.fanout import fan_out, forget, under
from flows.tasks import task
from star.config import EnvParams, InferParams, ModelParams, RunnerParams, TeacherParams
from star.io import atomic_dir, content_digest, read_jsonl
from star.tracking import log_episode_traces

if TYPE_CHECKING:  # QA stages import this module too: travel code loads only where a travel flow runs
    from star.travel.query import Query
    from star.travel.sandbox import Sandbox


@task
def run_teacher(teacher: TeacherParams, env: EnvParams, sandbox: Sandbox, queries: list[Query]) -> list[dict]:
    from flows.distill import make_teacher
    from star.travel.distill import run_episode
    from star.travel.sandbox_index import index_for
    from star.travel.tools import TravelTools

    # The reference is the teacher at its best: no deliberate mistakes.
    agent = make_teacher(teacher.model_copy(update={"mistake_rate": 0.0}))
    tools, index = TravelTools(sandbox, row_cap=env.row_cap), index_for(sandbox)
    return [run_episode(agent, tools, index, q, 0, seed=teacher.seed, max_turns=env.max_turns, fault_rate=0.0) for q in queries]


def load_policy(infer: InferParams, model_dir: Path) -> tuple[Any, Any]:
    """(backend, tokenizer) for the model in `model_dir`, on the configured backend."""
    from transformers import AutoTokenizer

    from star.agent.backend import make_backend
    from star.models.base import model_source

    source = model_source(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(source)
    if infer.backend == "transformers":
        import torch
        from transformers import AutoModelForCausalLM

        torch.manual_seed(infer.seed)
        lm = AutoModelForCausalLM.from_pretrained(source).eval()
        if torch.cuda.is_available():
            lm = lm.to("cuda")
        return make_backend("transformers", model=lm, tokenizer=tokenizer, temperature=infer.temperature, top_p=infer.top_p, seed=infer.seed), tokenizer
    if infer.backend == "vllm":
        return make_backend("vllm", model=source, temperature=infer.temperature, top_p=infer.top_p, seed=infer.seed), tokenizer
    return make_backend("openai", **infer.openai.model_dump(), temperature=infer.temperature), tokenizer


def play_model(infer: InferParams, env: EnvParams, model: ModelParams, sandbox: Sandbox, queries: list[Query], model_dir: Path, policy: str) -> list[dict]:
    """The policy's episodes on `queries`, as trajectory rows."""
    from star.agent.rollout import RolloutLimits
    from star.travel.play import play, trajectory_row
    from star.travel.tools import TravelTools

    backend, tokenizer = load_policy(infer, model_dir)
    limits = RolloutLimits(max_turns=infer.max_turns, max_new_tokens=infer.max_new_tokens, max_total_tokens=infer.max_total_tokens, max_invalid_turns=infer.max_invalid_turns)
    tools = TravelTools(sandbox, row_cap=env.row_cap)
    played = play(backend, tokenizer, tools, queries, limits, batch_size=infer.batch_size, seed=infer.seed, tools_in_prompt=model.tool_schemas)
    return [trajectory_row(q, e, t, policy) for q, e, t in played]


run_model = task(play_model)


def play_chunk(items: list[Query], first: int, **shared: Any) -> list[dict]:
    """One task: a chunk of queries; the model loads once per task."""
    return play_model(queries=items, **shared)


def model_fingerprint(*settings: Any, inputs: tuple[Path, ...]) -> str:
    """What determines a policy's rows: its settings and the content of its inputs (model, data)."""
    text = "".join(s.model_dump_json() if hasattr(s, "model_dump_json") else json.dumps(s) for s in settings)
    return hashlib.sha256((text + content_digest(*inputs)).encode()).hexdigest()[:16]


@task
def save_rows(rows: list[dict], out: Path) -> dict[str, float]:
    with atomic_dir(out) as tmp:
        with open(tmp / "trajectories.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
    n = max(len(rows), 1)
    return {
        "episodes": len(rows),
        "answered": sum(bool(r["answer"]) for r in rows) / n,
        "truncated": sum(bool(r["truncated"]) for r in rows) / n,
        "mean_turns": sum(r["turns"] for r in rows) / n,
        "tool_errors_per_episode": sum(r["tool_errors"] for r in rows) / n,
    }


@flow(name="infer")
def _infer(infer: InferParams, env: EnvParams, model: ModelParams, policy: str, world: Path, queries: Path, model_dir: Path, out: Path, store: Path, size: int | None) -> dict[str, float]:
    from star.travel.query import Query
    from star.travel.sandbox import Sandbox

    sandbox = Sandbox.load(world)
    query_list = [Query.model_validate(r) for r in read_jsonl(queries)]
    fingerprint = model_fingerprint(infer, env, model, policy, inputs=(world, queries, model_dir))
    shared = dict(infer=infer, env=env, model=model, sandbox=sandbox, model_dir=model_dir, policy=policy)
    rows = fan_out(play_chunk, query_list, size or max(len(query_list), 1), fingerprint, store, desc=f"infer {policy}", **shared)
    metrics = save_rows(rows, out)
    forget(store)
    log_episode_traces(rows)  # the first episodes, to browse in MLflow's Traces tab
    return metrics


def infer_flow(
    infer: InferParams, env: EnvParams, model: ModelParams, runner: RunnerParams, policy: str, world: Path, queries: Path, model_dir: Path, out: Path, progress_dir: Path
) -> dict[str, float]:
    """The infer flow under the task runner of `runner`; finished chunks wait in progress_dir/infer_POLICY."""
    flow_ = under(_infer, runner, threads=1)
    return flow_(infer, env, model, policy, world, queries, model_dir, out, progress_dir / f"infer_{policy}", runner.episodes_per_task)


@flow(name="infer_teacher")
def infer_teacher_flow(teacher: TeacherParams, env: EnvParams, world: Path, queries: Path, out: Path) -> dict[str, float]:
    from star.travel.query import Query
    from star.travel.sandbox import Sandbox

    sandbox = Sandbox.load(world)
    query_list = [Query.model_validate(r) for r in read_jsonl(queries)]
    rows = run_teacher(teacher, env, sandbox, query_list)
    metrics = save_rows(rows, out)
    log_episode_traces(rows)
    return metrics
