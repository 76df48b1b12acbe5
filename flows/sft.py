"""sft: supervised fine-tuning of the base policy on the filtered teacher trajectories."""

from __future__ import annotations

import shutil
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import ModelParams, SFTStageParams
from star.io import fingerprint, read_jsonl
from star.models.base import model_source
from star.tracking import log_model


def train(sft: SFTStageParams, model: ModelParams, data: Path, base: Path, out: Path, checkpoints: Path, curve: Path) -> dict[str, float]:
    import mlflow
    from accelerate import PartialState

    from star.train.sft import MetricsCallback, train_sft

    rows = read_jsonl(data)
    # A checkpoint only resumes the same run: same params, data and base model.
    checkpoints = checkpoints / fingerprint(sft, model, inputs=(data, base))
    if not model.tool_schemas:
        # the system prompt lists the tools; schemas would only cost tokens
        rows = [{k: v for k, v in r.items() if k != "tools"} for r in rows]
    callback = MetricsCallback(lambda metrics, step: mlflow.log_metrics({f"train/{k}": v for k, v in metrics.items()}, step=step))
    metrics = train_sft(model_source(base), rows, out, sft, checkpoints, callbacks=[callback], curve_path=curve)
    if PartialState().is_main_process:  # in a multi-process run the first process owns the files
        shutil.rmtree(checkpoints, ignore_errors=True)
    return metrics


# The flow's task; `train` itself is what the other processes of a multi-process run call.
fine_tune = task(train, name="fine_tune")


@flow(name="sft")
def sft_flow(sft: SFTStageParams, model: ModelParams, data: Path, base: Path, out: Path, checkpoints: Path, curve: Path) -> dict[str, float]:
    metrics = fine_tune(sft, model, data, base, out, checkpoints, curve)
    log_model(out, {"sft": sft.model_dump(mode="json"), "model": model.model_dump(mode="json")}, metrics)  # MLflow's Models
    return metrics
