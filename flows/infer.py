"""infer: run one policy (a model, a domain's baseline, or the domain's expert as the reference) on the test split.

A policy's tasks are cut into chunks, each one Prefect task under the task
runner that params choose (flows/fanout.py): one chunk by default, so the model
loads once; on a Ray or Dask cluster, chunks play on its nodes. A finished chunk
is persisted, so an interrupted stage resumes from it. Where the domain scores
its rows cheaply (QA's EM/F1), the stage writes their summary too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from flows.fanout import fan_out, forget, under
from flows.tasks import task
from star.config import InferParams, ModelParams, RunnerParams
from star.domain import Domain
from star.io import atomic_dir, fingerprint, write_json, write_jsonl
from star.tracking import log_episode_traces


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
    if infer.backend == "openai":
        return make_backend("openai", **infer.openai.model_dump(), temperature=infer.temperature), tokenizer
    return make_backend(infer.backend, model=source, tokenizer=tokenizer, temperature=infer.temperature, top_p=infer.top_p, seed=infer.seed), tokenizer


def play_policy(infer: InferParams, model: ModelParams, domain: Domain, policy: str, tasks: list, model_dir: Path | None) -> list[dict]:
    """The policy's episodes on `tasks`, as trajectory rows; no model: the domain's expert at its best."""
    if model_dir is None:
        return domain.reference_episodes(tasks)
    from star.agent.policy import play_tasks
    from star.agent.rollout import RolloutLimits

    backend, tokenizer = load_policy(infer, model_dir)
    turns = domain.episode_turns(infer.max_turns)
    limits = RolloutLimits.of(infer, max_turns=min(infer.max_turns, turns))

    def make_env(task: Any, seed: int) -> Any:
        return domain.make_env(task, seed, max_turns=turns, policy=policy)

    schemas = domain.tool_schemas(policy, model.tool_schemas)
    played = play_tasks(backend, tokenizer, make_env, tasks, limits, batch_size=infer.batch_size, seed=infer.seed, tools_in_prompt=schemas)
    return [domain.policy_row(t, e, trajectory, policy) for t, e, trajectory in played]


run_policy = task(play_policy)


def play_chunk(items: list, first: int, **shared: Any) -> list[dict]:
    """One task: a chunk of tasks; the model loads once per task."""
    return play_policy(tasks=items, **shared)


@task
def save_rows(rows: list[dict], out: Path) -> dict[str, float]:
    with atomic_dir(out) as tmp:
        write_jsonl(tmp / "trajectories.jsonl", rows)
    n = max(len(rows), 1)
    return {
        "episodes": len(rows),
        "answered": sum(bool(r["answer"]) for r in rows) / n,
        "truncated": sum(bool(r["truncated"]) for r in rows) / n,
        "mean_turns": sum(r["turns"] for r in rows) / n,
        "tool_errors_per_episode": sum(r["tool_errors"] for r in rows) / n,
    }


@flow(name="infer")
def _infer(
    infer: InferParams, model: ModelParams, domain: Domain, policy: str, tasks: Path, model_dir: Path | None, out: Path, report: Path, store: Path, size: int | None
) -> dict[str, float]:
    items = domain.load_tasks(tasks)
    inputs = (domain.world, tasks) + ((model_dir,) if model_dir else ())
    # what determines a policy's rows: its settings and the content of its inputs (model, data)
    progress = fingerprint(infer, model, *domain.params.values(), policy, inputs=inputs)
    shared = dict(infer=infer, model=model, domain=domain.loaded(), policy=policy, model_dir=model_dir)
    rows = fan_out(play_chunk, items, size or max(len(items), 1), progress, store, desc=f"infer {policy}", **shared)
    metrics = save_rows(rows, out)
    forget(store)
    log_episode_traces(rows)  # the first episodes, to browse in MLflow's Traces tab
    summary = domain.report(rows)
    if summary is not None:
        flat = {k: v for k, v in summary.items() if isinstance(v, (int, float))}
        write_json(report / "summary.json", summary)
        write_json(report / "metrics.json", flat)
        metrics = {**metrics, **flat}
    return metrics


def infer_flow(
    infer: InferParams, model: ModelParams, runner: RunnerParams, domain: Domain, policy: str, tasks: Path, model_dir: Path | None, out: Path, report: Path, store: Path
) -> dict[str, float]:
    """The infer flow under the task runner of `runner`; finished chunks wait in `store`."""
    flow_ = under(_infer, runner, threads=1)
    return flow_(infer, model, domain, policy, tasks, model_dir, out, report, store, runner.episodes_per_task)
