"""distill: a teacher solves the training queries in the sandbox, chunks of episodes fanned out
as Prefect tasks (flows/fanout.py), each saved as it finishes so a rerun resumes."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from prefect import flow

from flows.fanout import EXPERT_CHUNK, chunk_size, fan_out, forget, under
from flows.tasks import task
from star.config import EnvParams, RunnerParams, TeacherParams
from star.env.teacher import Teacher
from star.io import atomic_dir, read_jsonl, write_json
from star.travel.distill import ExpertTeacher, run_episode
from star.travel.expert import Expert
from star.travel.query import Query
from star.travel.sandbox import Sandbox
from star.travel.sandbox_index import index_for
from star.travel.tools import TravelTools


def make_teacher(params: TeacherParams) -> Teacher:
    if params.kind == "openai":
        from star.travel.openai_teacher import OpenAITeacher

        return OpenAITeacher(params.openai)
    return ExpertTeacher(Expert(params.mistake_rate, params.top_k, params.upgrade_prob))


# Where the teacher's server lives and how patiently it is called do not change
# what it answers: moving it to another address keeps the progress.
TRANSPORT = {"base_url", "api_key_env", "timeout", "retries", "concurrency"}


def progress_fingerprint(teacher: TeacherParams, env: EnvParams, world: Path, queries: Path) -> str:
    """Progress belongs to what determines the trajectories (teacher, env, input), never to another."""
    settings = teacher.model_dump_json(exclude={"openai": TRANSPORT}) + env.model_dump_json()
    data = queries.read_bytes() + b"".join(p.read_bytes() for p in sorted(world.glob("*.parquet")))
    return hashlib.sha256(settings.encode() + data).hexdigest()[:16]


def play_chunk(items: list[tuple[Query, int]], first: int, teacher: TeacherParams, env: EnvParams, sandbox: Sandbox) -> list[dict]:
    """One task: the episodes of a chunk. Every episode has its own seeds, so chunks may run anywhere, in any order."""
    solver, tools, index = make_teacher(teacher), TravelTools(sandbox, row_cap=env.row_cap), index_for(sandbox)
    return [run_episode(solver, tools, index, q, s, seed=teacher.seed, max_turns=env.max_turns, fault_rate=teacher.fault_rate) for q, s in items]


@task
def save_trajectories(rows: list[dict], out: Path) -> dict[str, float]:
    stats: Counter = Counter()
    for row in rows:
        level = row["level"]
        stats["trajectories"] += 1
        stats[f"trajectories_{level}"] += 1
        stats[f"success_{level}"] += row["success"]
        stats["success"] += row["success"]
        stats["turns"] += row["turns"]
        stats["tool_errors"] += row["tool_errors"]
    with atomic_dir(out) as tmp:
        with open(tmp / "trajectories.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        write_json(tmp / "stats.json", dict(stats))
    n = max(stats["trajectories"], 1)
    metrics = {"trajectories": stats["trajectories"], "success_rate": stats["success"] / n, "mean_turns": stats["turns"] / n}
    metrics["tool_errors_per_trajectory"] = stats["tool_errors"] / n
    for level in ("easy", "medium", "hard"):
        if stats[f"trajectories_{level}"]:
            metrics[f"success_rate_{level}"] = stats[f"success_{level}"] / stats[f"trajectories_{level}"]
    return metrics


@flow(name="distill")
def _distill(teacher: TeacherParams, env: EnvParams, world: Path, queries: Path, out: Path, store: Path, size: int) -> dict[str, float]:
    items = [(Query.model_validate(row), s) for row in read_jsonl(queries) for s in range(teacher.samples)]
    fingerprint = progress_fingerprint(teacher, env, world, queries)
    rows = fan_out(play_chunk, items, size, fingerprint, store, desc="distill", teacher=teacher, env=env, sandbox=Sandbox.load(world))
    metrics = save_trajectories(rows, out)
    forget(store)
    return metrics


def distill_flow(teacher: TeacherParams, env: EnvParams, runner: RunnerParams, world: Path, queries: Path, out: Path, progress_dir: Path) -> dict[str, float]:
    """The distill flow under the task runner of `runner`; finished chunks wait in progress_dir/distill."""
    openai = teacher.kind == "openai"
    flow_ = under(_distill, runner, threads=teacher.openai.concurrency if openai else 1)
    return flow_(teacher, env, world, queries, out, progress_dir / "distill", chunk_size(runner, 1 if openai else EXPERT_CHUNK))
