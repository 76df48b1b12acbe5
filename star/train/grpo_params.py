"""The schema of the GRPO section (trainer knobs; each domain's rewards are its own section): no logic, so params load without importing the trainer."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from star.agent.limits import RolloutLimits


class VLLMRolloutParams(BaseModel):
    """The vLLM engine that generates GRPO's rollouts (`backend: vllm`), created once per stage and synced every step."""

    model_config = ConfigDict(extra="forbid")

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="the engine's weights and activations: auto serves float32 weights in bfloat16 on CPU, the model's own dtype on GPU; float32 matches the trainer's numerics"
    )
    gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="GPU: the fraction of the GPU's memory the engine takes (weights and KV cache); the trainer needs the rest")
    kv_cache_bytes: int = Field(2 << 30, ge=1 << 20, description="CPU: bytes of the engine's KV cache (vLLM's own default, most of the machine's memory, fails beside a trainer)")
    sleep: bool = Field(False, description="GPU: free the engine's memory while the trainer updates (vLLM's sleep mode, level 1), and wake it for the next rollouts; not on CPU")
    enforce_eager: bool = Field(False, description="no torch.compile or CUDA graphs: a faster start, slower generation")


class GRPOParams(RolloutLimits):
    """Multi-turn GRPO hyperparameters, and the limits of its episodes (star/agent/limits.py)."""

    model_config = ConfigDict(extra="forbid")

    algorithm: Literal["grpo", "dapo", "arpo"] = Field(
        "dapo", description="grpo | dapo (dynamic sampling + DAPO loss) | arpo (adaptive branching from the least certain turn)"
    )
    num_generations: int = Field(8, ge=2, description="G: trajectories per query, one group")
    queries_per_step: int = Field(4, ge=1, description="queries (groups) per optimiser step")
    steps: int = Field(40, ge=1, description="optimiser steps")
    learning_rate: float = Field(3e-4, gt=0, description="learning rate")
    optimizer: Literal["adamw", "sgd"] = Field(
        "adamw",
        description="adamw: TRL's default | sgd: plain gradient steps, sized by the gradient "
        "(the built-in model's GRPO gradients have a norm of about 0.01: QA was run with a learning rate of 0.5 to 2)",
    )
    beta: float = Field(0.0, ge=0, description="KL coefficient; 0: no KL term, no reference model")
    epsilon: float = Field(0.2, gt=0, description="lower clip range of the probability ratio")
    epsilon_high: float = Field(0.28, gt=0, description="upper clip range, at least epsilon (clip-higher)")
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = Field(
        "dr_grpo", description="TRL's loss: grpo | dr_grpo | dapo | bnpo (algorithm dapo always uses dapo)"
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "none", description="divide advantages by the std of the group | batch | none (group: near-flat groups turn noise into full-size advantages)"
    )
    mask_truncated_completions: bool = Field(
        True, description="leave episodes cut by a limit out of the loss; they stay in their group's reward statistics"
    )
    temperature: float = Field(0.7, gt=0, description="sampling temperature of the rollouts")
    backend: Literal["transformers", "vllm"] = Field(
        "transformers",
        description="what generates the rollouts: transformers (the trained model itself) | vllm (an engine in the trainer's process, its weights replaced in place after every optimizer step; "
        "needs vLLM: the gpu extra, or .venv-vllm on CPU, which the stage then runs in)",
    )
    vllm: VLLMRolloutParams = Field(default_factory=VLLMRolloutParams, description="the vLLM engine, with backend vllm")
    importance_correction: Literal["none", "tis"] = Field(
        "none",
        description="none | tis: truncated importance sampling, each trained token's loss times min(p_trainer / p_sampler, importance_cap), "
        "for a sampler whose numerics are not the trainer's (vLLM's kernels, bf16); TRL's token_truncate",
    )
    importance_cap: float = Field(3.0, gt=1, description="tis: the largest importance weight a token gets (TRL's default)")
    dapo_max_tries: int = Field(4, ge=0, description="dapo: times a group whose rewards are all equal is replaced by another query's")
    unseen_queries: bool = Field(
        True,
        description="travel: train only on training queries whose trajectories are not in the SFT set (SFT already reproduces its own, so their groups teach little)",
    )
    skip_levels: list[str] = Field(
        default_factory=lambda: ["easy"],
        description="travel's task levels left out of RL training (QA: qa.grpo.skip_levels): groups the SFT model already solves carry no advantage",
    )
    save_steps: int = Field(10, ge=1, description="steps between checkpoints")
    bf16: bool = Field(False, description="bf16 autocast over float32 weights (the saved model is float32): worth it on GPUs; on a CPU only with bf16 units (avx512_bf16, AMX), so measure first")
    gradient_checkpointing: bool = Field(False, description="recompute activations in the backward pass to save memory")
    seed: int = Field(0, description="seed of the rollouts and of training")

    @model_validator(mode="after")
    def _check(self) -> GRPOParams:
        if self.epsilon_high < self.epsilon:
            raise ValueError("epsilon_high must be >= epsilon (clip-higher)")
        if self.algorithm == "arpo" and self.num_generations % 2:
            raise ValueError("arpo splits each group in two: num_generations must be even")
        return self
