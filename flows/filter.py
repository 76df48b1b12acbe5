"""filter: keep passing, well-formed, short-enough trajectories; draw the SFT set by size and mix;
optionally follow each with renamed copies."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import FilterParams, ModelParams
from star.io import atomic_dir, read_jsonl, write_json
from star.models.base import model_source
from star.train.filtering import select
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
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_source(base))

    def count_tokens(row: dict) -> int:
        tools = json.loads(row["tools"]) if model.tool_schemas else None
        ids = tokenizer.apply_chat_template(row["messages"], tools=tools, tokenize=True, return_dict=False)
        return len(ids)

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


@task
def save_selection(kept: list[dict], stats: dict, out: Path) -> dict[str, float]:
    with atomic_dir(out) as tmp:
        with open(tmp / "train.jsonl", "w") as f:
            for row in kept:
                f.write(json.dumps(row, sort_keys=True) + "\n")
        write_json(tmp / "stats.json", stats)
    tokens = [r["tokens"] for r in kept]
    return {**stats, "mean_tokens": sum(tokens) / max(len(tokens), 1), "max_tokens": max(tokens, default=0)}


@flow(name="filter")
def filter_flow(filter: FilterParams, model: ModelParams, trajectories: Path, base: Path, world: Path, out: Path) -> dict[str, float]:
    kept, stats = select_trajectories(filter, model, trajectories, base, world)
    return save_selection(kept, stats, out)
