"""grpo: multi-turn GRPO in the sandbox, starting from the SFT model."""

from __future__ import annotations

import hashlib
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import EnvParams, GRPOStageParams, ModelParams
from star.io import content_digest, read_jsonl
from star.models.base import model_source
from star.tracking import log_model
from star.travel.query import Query
from star.travel.sandbox import Sandbox


def train(
    grpo: GRPOStageParams, env: EnvParams, model: ModelParams, world: Path, queries: Path, sft_set: Path, sft: Path, out: Path, checkpoints: Path, curve: Path
) -> dict[str, float]:
    import mlflow

    from star.train.grpo import train_grpo
    from star.travel.env import SYSTEM_PROMPT, TravelEnv
    from star.travel.rewards import Scorer
    from star.travel.sandbox_index import index_for
    from star.travel.tools import TravelTools

    sandbox = Sandbox.load(world)
    tools = TravelTools(sandbox, row_cap=env.row_cap)
    query_list = [Query.model_validate(r) for r in read_jsonl(queries)]
    seen = {row["query_id"] for row in read_jsonl(sft_set)}

    def make_env(query: Query, seed: int) -> TravelEnv:
        return TravelEnv(tools, max_turns=grpo.max_turns, fault_rate=env.fault_rate, seed=seed + query.idx)

    # A checkpoint only resumes the same run: same params, training queries and SFT model.
    fingerprint = hashlib.sha256((grpo.model_dump_json() + env.model_dump_json() + model.model_dump_json() + content_digest(queries, sft_set, sft)).encode()).hexdigest()[:12]
    return train_grpo(
        grpo, model_source(sft), query_list, lambda q: q.query, make_env, Scorer(index_for(sandbox), grpo), SYSTEM_PROMPT,
        out, checkpoints / fingerprint, curve_path=curve, tools_in_prompt=model.tool_schemas,
        log_fn=lambda metrics, step: mlflow.log_metrics(metrics, step=step), seen=seen,
    )


# The flow's task; `train` itself is what the other processes of a multi-process run call.
reinforce = task(train, name="reinforce")


@flow(name="grpo")
def grpo_flow(
    grpo: GRPOStageParams, env: EnvParams, model: ModelParams, world: Path, queries: Path, sft_set: Path, sft: Path, out: Path, checkpoints: Path, curve: Path
) -> dict[str, float]:
    metrics = reinforce(grpo, env, model, world, queries, sft_set, sft, out, checkpoints, curve)
    params = {"grpo": grpo.model_dump(mode="json"), "env": env.model_dump(mode="json"), "model": model.model_dump(mode="json")}
    log_model(out, params, metrics)  # MLflow's Models
    return metrics
