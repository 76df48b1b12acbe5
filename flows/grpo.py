"""grpo: multi-turn GRPO in a domain's env, starting from the SFT model."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import EnvParams, GRPOStageParams, ModelParams
from star.domain import Domain
from star.io import fingerprint, read_jsonl
from star.models.base import model_source
from star.tracking import log_model


def checkpoint_fingerprint(grpo: GRPOStageParams, env: EnvParams, model: ModelParams, domain: Domain, tasks: Path, sft_set: Path, sft: Path) -> str:
    """What a checkpoint belongs to: the params, the training tasks, the SFT set and model, and the
    trainer's and the domain's code. Any change starts GRPO afresh instead of resuming."""
    trainer = [Path(importlib.util.find_spec(f"star.train.{name}").origin) for name in ("grpo", "offpolicy", "samplers")]
    code = (*trainer, Path(inspect.getfile(type(domain))))
    return fingerprint(grpo, env, model, *domain.params.values(), inputs=(tasks, sft_set, sft, *code))


def train(
    grpo: GRPOStageParams, env: EnvParams, model: ModelParams, domain: Domain, tasks: Path, sft_set: Path, sft: Path, out: Path, checkpoints: Path, curve: Path
) -> dict[str, float]:
    import mlflow

    from star.train.grpo import train_grpo

    grpo = domain.grpo_params(grpo)
    seen = {row["query_id"] for row in read_jsonl(sft_set)}
    turns = domain.episode_turns(grpo.max_turns)

    def make_env(task: object, seed: int) -> object:
        return domain.make_env(task, seed, max_turns=turns, fault_rate=env.fault_rate)

    run = checkpoint_fingerprint(grpo, env, model, domain, tasks, sft_set, sft)
    return train_grpo(
        grpo, model_source(sft), domain.load_tasks(tasks), domain.prompt, make_env, domain.rubric(grpo), domain.system_prompt,
        out, checkpoints / run, curve_path=curve, tools_in_prompt=model.tool_schemas,
        log_fn=lambda metrics, step: mlflow.log_metrics(metrics, step=step), seen=seen,
    )


# The flow's task; `train` itself is what the other processes of a multi-process run call.
reinforce = task(train, name="reinforce")


@flow(name="grpo")
def grpo_flow(
    grpo: GRPOStageParams, env: EnvParams, model: ModelParams, domain: Domain, tasks: Path, sft_set: Path, sft: Path, out: Path, checkpoints: Path, curve: Path
) -> dict[str, float]:
    metrics = reinforce(grpo, env, model, domain, tasks, sft_set, sft, out, checkpoints, curve)
    # how the model was trained: the trainer's knobs and the domain's sections (its reward among them)
    sections = {name: section.model_dump(mode="json") for name, section in domain.params.items()}
    params = {**sections, "grpo": domain.grpo_params(grpo).model_dump(mode="json"), "env": env.model_dump(mode="json"), "model": model.model_dump(mode="json")}
    log_model(out, params, metrics)  # MLflow's Models
    return metrics
