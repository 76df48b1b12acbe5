"""filter: keep passing, well-formed, short-enough trajectories; draw the SFT set by size and mix;
optionally follow each with renamed copies."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import FilterParams, ModelParams
from star.io import read_jsonl
from star.models.base import model_source
from star.train.filtering import chat_token_counter, select, write_selection
from star.travel.rename import Vocabulary, renamed_copies
from star.travel.sandbox import Sandbox


def with_renamed_copies(
    kept: list[dict], vocabulary: Vocabulary, filter: FilterParams, count_tokens: Callable[[dict], int], stats: Counter
) -> list[dict]:
    """Each kept row followed by its renamed copies that fit the token limit (a tokenizer
    without one token per name may spell a renamed name longer)."""
    rows = []
    for index, row in enumerate(kept):
        rows.append(row)
        # seeded by the row's place in the sorted selection: the same params give the same bytes
        rng = random.Random(f"rename {filter.seed} {index}")
        for copy in renamed_copies(row, vocabulary, filter.rename_copies, rng):
            tokens = count_tokens(copy)
            if tokens > filter.max_tokens:
                stats["dropped_renamed_too_long"] += 1
            else:
                rows.append({**copy, "tokens": tokens})
    stats["renamed_copies"] = len(rows) - len(kept)
    return rows


@task
def select_trajectories(
    filter: FilterParams, model: ModelParams, trajectories: Path, base: Path, world: Path
) -> tuple[list[dict], dict]:
    count_tokens = chat_token_counter(model_source(base), model.tool_schemas)
    kept, stats = select(
        read_jsonl(trajectories),
        require=filter.require,
        max_tokens=filter.max_tokens,
        count_tokens=count_tokens,
        size=filter.size,
        levels=filter.levels,
        seed=filter.seed,
    )
    if filter.rename_copies:
        kept = with_renamed_copies(kept, Vocabulary(Sandbox.load(world)), filter, count_tokens, stats)
    return kept, dict(stats)


save_selection = task(write_selection)


@flow(name="filter")
def filter_flow(filter: FilterParams, model: ModelParams, trajectories: Path, base: Path, world: Path, out: Path) -> dict[str, float]:
    kept, stats = select_trajectories(filter, model, trajectories, base, world)
    return save_selection(kept, stats, out)
