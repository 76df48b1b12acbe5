"""distill: a domain's teacher solves the training tasks, chunks of episodes fanned out
as Prefect tasks (flows/fanout.py), each saved as it finishes so a rerun resumes."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.fanout import EXPERT_CHUNK, chunk_size, fan_out, forget, under
from flows.tasks import task
from star.config import RunnerParams
from star.domain import Domain
from star.io import atomic_dir, fingerprint, write_json, write_jsonl


def progress_fingerprint(domain: Domain, tasks: Path) -> str:
    """Progress belongs to what determines the trajectories (the expert's settings, the world, the tasks), never to another."""
    return fingerprint(domain.expert_settings(), inputs=(domain.world, tasks))


def play_chunk(items: list[tuple], first: int, domain: Domain) -> list[dict]:
    """One task: the episodes of a chunk. Every episode has its own seeds, so chunks may run anywhere, in any order."""
    return domain.expert_episodes(items)


@task
def save_trajectories(rows: list[dict], stats: dict, out: Path) -> None:
    with atomic_dir(out) as tmp:
        write_jsonl(tmp / "trajectories.jsonl", rows)
        write_json(tmp / "stats.json", stats)


@flow(name="distill")
def _distill(domain: Domain, tasks: Path, out: Path, store: Path, size: int) -> dict[str, float]:
    items = [(t, s) for t in domain.load_tasks(tasks) for s in range(domain.expert_samples())]
    rows = fan_out(play_chunk, items, size, progress_fingerprint(domain, tasks), store, desc=f"{domain.name} distill", domain=domain.loaded())
    stats, metrics = domain.trajectory_metrics(rows)
    save_trajectories(rows, stats, out)
    forget(store)
    return metrics


def distill_flow(domain: Domain, runner: RunnerParams, tasks: Path, out: Path, store: Path) -> dict[str, float]:
    """The distill flow under the task runner of `runner`; finished chunks wait in `store`."""
    threads, chunk = domain.expert_concurrency()
    return under(_distill, runner, threads=threads)(domain, tasks, out, store, chunk_size(runner, chunk or EXPERT_CHUNK))
