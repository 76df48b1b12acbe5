"""base: the untrained policy. builtin:tiny is built here from the domain's own text, builtin:smollm2 converted from its GGUF file."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import ModelParams
from star.domain import Domain
from star.io import read_jsonl
from star.models.base import prepare_base


@task
def build_base(domain: Domain, model: ModelParams, trajectories: Path, out: Path) -> dict[str, float]:
    prepare_base(
        out, model.name_or_path, model.tiny, lambda: domain.base_texts(read_jsonl(trajectories), model.tool_schemas),
        lambda: domain.entity_names(model.tiny.whole_identifiers),
    )
    metrics: dict[str, float] = {}
    if (out / "tokenizer.json").exists():
        from transformers import AutoConfig, AutoTokenizer

        metrics["vocab_size"] = len(AutoTokenizer.from_pretrained(out))
        config = AutoConfig.from_pretrained(out)
        metrics["hidden_size"] = config.hidden_size
        metrics["num_layers"] = config.num_hidden_layers
    return metrics


@flow(name="base")
def base_flow(domain: Domain, model: ModelParams, trajectories: Path, out: Path) -> dict[str, float]:
    return build_base(domain, model, trajectories, out)
