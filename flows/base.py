"""base: the untrained policy. builtin:tiny is built here from the task's own text, builtin:smollm2 converted from its GGUF file."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import ModelParams
from star.io import read_jsonl
from star.models.base import prepare_base
from star.models.tiny import corpus_from_trajectories
from star.travel.sandbox import Sandbox
from star.travel.synthetic import entity_names


@task
def build_base(model: ModelParams, world: Path, trajectories: Path, out: Path) -> dict[str, float]:
    def corpus() -> list[str]:
        rows = read_jsonl(trajectories)
        tools = json.loads(rows[0]["tools"]) if rows and model.tool_schemas else []
        return corpus_from_trajectories([r["messages"] for r in rows], tools)

    prepare_base(out, model.name_or_path, model.tiny, corpus, lambda: entity_names(Sandbox.load(world)))
    metrics: dict[str, float] = {}
    if (out / "tokenizer.json").exists():
        from transformers import AutoConfig, AutoTokenizer

        metrics["vocab_size"] = len(AutoTokenizer.from_pretrained(out))
        config = AutoConfig.from_pretrained(out)
        metrics["hidden_size"] = config.hidden_size
        metrics["num_layers"] = config.num_hidden_layers
    return metrics


@flow(name="base")
def base_flow(model: ModelParams, world: Path, trajectories: Path, out: Path) -> dict[str, float]:
    return build_base(model, world, trajectories, out)
