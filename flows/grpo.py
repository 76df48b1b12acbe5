"""grpo: multi-turn GRPO in the sandbox, starting from the SFT model."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import EnvParams, GRPOStageParams, ModelParams
from star.io import atomic_dir, read_jsonl
from star.models.base import model_source
from star.travel.query import Query
from star.travel.sandbox import Sandbox


@task
def reinforce(grpo: GRPOStageParams, env: EnvParams, model: ModelParams, world: Path, queries: Path, sft: Path, out: Path, checkpoints: Path, curve: Path) -> dict[str, float]:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import mlflow
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from star.agent.backends import TransformersBackend
    from star.agent.policy import play
    from star.agent.rollout import RolloutLimits
    from star.train.curves import curve as training_curve, write_curve
    from star.train.grpo import EpisodeRunner, Scorer, grpo_config
    from star.travel.env import SYSTEM_PROMPT
    from star.travel.evaluate import index_for
    from star.travel.tools import TravelTools

    torch.manual_seed(grpo.seed)
    sandbox = Sandbox.load(world)
    tools = TravelTools(sandbox, row_cap=env.row_cap)
    query_list = [Query.model_validate(r) for r in read_jsonl(queries)]
    source = model_source(sft)
    tokenizer = AutoTokenizer.from_pretrained(source)
    policy = AutoModelForCausalLM.from_pretrained(source)
    limits = RolloutLimits(max_turns=grpo.max_turns, max_new_tokens=grpo.max_new_tokens, max_total_tokens=grpo.max_total_tokens)

    def play_batch(batch: list[Query], seed: int, prefixes: list[list[str]] | None) -> list:
        was_training = policy.training
        policy.eval()
        backend = TransformersBackend(policy, tokenizer, temperature=grpo.temperature, seed=seed)
        played = play(backend, tokenizer, tools, batch, limits, batch_size=len(batch), fault_rate=env.fault_rate, seed=seed, tools_in_prompt=model.tool_schemas, prefixes=prefixes)
        policy.train(was_training)
        return [(e, t) for _, e, t in played]

    runner = EpisodeRunner(play_batch, query_list, Scorer(index_for(sandbox), grpo), grpo)

    def env_reward(prompts, completions, reward, **kwargs):
        return reward

    class LogRollouts(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            rollout = {f"rollout/{k}": v[-1] for k, v in runner.stats.items() if v}
            if state.log_history and "loss" in state.log_history[-1]:
                state.log_history[-1].update(rollout)  # checkpoints keep it: a resumed run has the whole curve
            metrics = {f"train/{k}": float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            mlflow.log_metrics({**metrics, **rollout}, step=state.global_step)

    dataset = Dataset.from_list([{"prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q.query}]} for q in query_list])
    fingerprint = hashlib.sha256((grpo.model_dump_json() + env.model_dump_json()).encode() + queries.read_bytes()).hexdigest()[:12]
    checkpoints = checkpoints / fingerprint
    config = grpo_config(grpo, checkpoints, use_cpu=not torch.cuda.is_available())
    trainer = GRPOTrainer(model=policy, reward_funcs=[env_reward], args=config, train_dataset=dataset, processing_class=tokenizer, rollout_func=runner, callbacks=[LogRollouts()])
    resume = any(checkpoints.glob("checkpoint-*"))
    result = trainer.train(resume_from_checkpoint=True if resume else None)
    with atomic_dir(out) as tmp:
        trainer.model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    write_curve(curve, training_curve(trainer.state.log_history, "loss"))
    shutil.rmtree(checkpoints, ignore_errors=True)
    stats = {k: sum(v) / len(v) for k, v in runner.stats.items() if v}
    first = {f"first_{k}": v[0] for k, v in runner.stats.items() if v}
    last = {f"last_{k}": v[-1] for k, v in runner.stats.items() if v}
    return {"train_loss": result.training_loss, "steps": result.global_step, "seconds_per_step": result.metrics["train_runtime"] / max(result.global_step, 1), **stats, **first, **last}


@flow(name="grpo")
def grpo_flow(grpo: GRPOStageParams, env: EnvParams, model: ModelParams, world: Path, queries: Path, sft: Path, out: Path, checkpoints: Path, curve: Path) -> dict[str, float]:
    return reinforce(grpo, env, model, world, queries, sft, out, checkpoints, curve)
