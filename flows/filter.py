"""filter: keep passing, well-formed, short-enough trajectories; draw the SFT set by size and mix."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import FilterParams, ModelParams
from star.io import atomic_dir, read_jsonl, write_json
from star.models.base import model_source
from star.train.filtering import select


@task
def select_trajectories(filter: FilterParams, model: ModelParams, trajectories: Path, base: Path) -> tuple[list[dict], dict]:
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
def filter_flow(filter: FilterParams, model: ModelParams, trajectories: Path, base: Path, out: Path) -> dict[str, float]:
    kept, stats = select_trajectories(filter, model, trajectories, base)
    return save_selection(kept, stats, out)
