"""distill: a teacher solves the training queries in the sandbox, saved as it goes."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from functools import partial
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import EnvParams, TeacherParams
from star.env.teacher import Teacher
from star.io import atomic_dir, read_jsonl, write_json
from star.resume import ProgressLog, run_resumable
from star.travel.distill import ExpertTeacher, run_episode
from star.travel.evaluate import index_for
from star.travel.expert import Expert
from star.travel.query import Query
from star.travel.sandbox import Sandbox
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


@task
def run_teacher(teacher: TeacherParams, env: EnvParams, world: Path, queries: Path, progress_dir: Path) -> list[dict]:
    sandbox = Sandbox.load(world)
    tools = TravelTools(sandbox, row_cap=env.row_cap)
    items = [(Query.model_validate(row), s) for row in read_jsonl(queries) for s in range(teacher.samples)]
    log = ProgressLog(progress_dir / f"distill-{progress_fingerprint(teacher, env, world, queries)}.jsonl", key=lambda r: (r["query_id"], r["sample"]))
    work = partial(
        _episode, make_teacher(teacher), tools, index_for(sandbox), seed=teacher.seed, max_turns=env.max_turns, fault_rate=teacher.fault_rate
    )
    concurrency = teacher.openai.concurrency if teacher.kind == "openai" else 1
    return run_resumable(items, lambda it: (it[0].idx, it[1]), work, log, concurrency=concurrency, desc="distill")


def _episode(teacher, tools, index, item, **kwargs) -> dict:
    query, sample = item
    return run_episode(teacher, tools, index, query, sample, **kwargs)


@task
def save_trajectories(rows: list[dict], out: Path, progress_dir: Path) -> dict[str, float]:
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
    for path in progress_dir.glob("distill-*.jsonl"):
        path.unlink()
    n = max(stats["trajectories"], 1)
    metrics = {"trajectories": stats["trajectories"], "success_rate": stats["success"] / n, "mean_turns": stats["turns"] / n}
    metrics["tool_errors_per_trajectory"] = stats["tool_errors"] / n
    for level in ("easy", "medium", "hard"):
        if stats[f"trajectories_{level}"]:
            metrics[f"success_rate_{level}"] = stats[f"success_{level}"] / stats[f"trajectories_{level}"]
    return metrics


@flow(name="distill")
def distill_flow(teacher: TeacherParams, env: EnvParams, world: Path, queries: Path, out: Path, progress_dir: Path) -> dict[str, float]:
    rows = run_teacher(teacher, env, world, queries, progress_dir)
    return save_trajectories(rows, out, progress_dir)
