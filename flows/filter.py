"""filter: keep a domain's passing, well-formed, short-enough trajectories; draw the SFT set
by size and mix (with the domain's augmentation, e.g. travel's renamed copies)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import ModelParams
from star.domain import Domain
from star.io import read_jsonl
from star.models.base import model_source
from star.train.filtering import chat_token_counter, select, write_selection


@task
def select_trajectories(domain: Domain, model: ModelParams, trajectories: Path, base: Path) -> tuple[list[dict], dict]:
    params = domain.filter_params()
    count_tokens = chat_token_counter(model_source(base), model.tool_schemas)
    kept, stats = select(
        read_jsonl(trajectories),
        judge=domain.judge,
        max_tokens=params.max_tokens,
        count_tokens=count_tokens,
        size=params.examples,
        levels=params.levels,
        seed=params.seed,
    )
    return domain.augment(kept, count_tokens, stats), dict(stats)


save_selection = task(write_selection)


@flow(name="filter")
def filter_flow(domain: Domain, model: ModelParams, trajectories: Path, base: Path, out: Path) -> dict[str, float]:
    kept, stats = select_trajectories(domain, model, trajectories, base)
    return save_selection(kept, stats, out)
