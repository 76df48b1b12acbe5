"""copy: copy pretraining of the built-in base model before SFT (see star/train/copy_pretrain.py)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import CopyPretrainParams, ModelParams
from star.models.base import model_source, write_source
from star.models.spec import BUILTIN_TINY


@task
def pretrain(copy_pretrain: CopyPretrainParams, model: ModelParams, base: Path, out: Path, checkpoints: Path) -> dict[str, float]:
    if not copy_pretrain.enabled or model.name_or_path != BUILTIN_TINY:
        # A pretrained model copies already: point at the base model instead.
        write_source(out, model_source(base))
        return {}
    import mlflow

    from star.train.copy_pretrain import pretrain_copy
    from star.train.sft import MetricsCallback

    callback = MetricsCallback(lambda metrics, step: mlflow.log_metrics({f"copy/{k}": v for k, v in metrics.items()}, step=step))
    return pretrain_copy(model_source(base), out, copy_pretrain, checkpoints, callbacks=[callback])


@flow(name="copy")
def copy_flow(copy_pretrain: CopyPretrainParams, model: ModelParams, base: Path, out: Path, checkpoints: Path) -> dict[str, float]:
    return pretrain(copy_pretrain, model, base, out, checkpoints)
