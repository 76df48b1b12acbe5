"""SFT hyperparameters, apart from the trainer so that reading a config imports no torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LoraParams(BaseModel):
    """LoRA adapters in place of full fine-tuning."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="train LoRA adapters instead of the whole model (GPUs with a 7B model: true)")
    r: int = Field(16, ge=1, description="rank of the adapters")
    alpha: int = Field(32, ge=1, description="scale of the adapters: their update is multiplied by alpha / r")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="dropout on the adapters' input")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear",
        description="module names to adapt, or all-linear: every linear layer but the LM head, which TRL cannot train through an adapter",
    )

    @model_validator(mode="after")
    def _targets(self) -> LoraParams:
        if isinstance(self.target_modules, list) and not self.target_modules:
            raise ValueError("lora.target_modules is empty; name modules or use 'all-linear'")
        if isinstance(self.target_modules, list) and "lm_head" in self.target_modules:
            raise ValueError(
                "lora.target_modules may not include lm_head: TRL computes the loss from its weight directly"
            )
        return self


class SFTParams(BaseModel):
    """SFT hyperparameters. The defaults suit the built-in tiny model on CPU."""

    model_config = ConfigDict(extra="forbid")

    learning_rate: float = Field(2e-3, gt=0.0, le=1.0, description="peak learning rate")
    num_epochs: float = Field(
        8.0, gt=0.0, description="passes over the SFT set; copying names from the query is learnt late, so train as long as the budget allows"
    )
    max_steps: int = Field(0, ge=0, description="optimiser steps; 0: train for num_epochs")
    per_device_batch_size: int = Field(8, ge=1, description="conversations per device in a batch")
    gradient_accumulation_steps: int = Field(1, ge=1, description="batches accumulated per optimiser step")
    max_length: int = Field(1536, ge=16, description="tokens per conversation; longer conversations are cut at the end")
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0, description="share of the steps spent warming up")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay")
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        "cosine", description="learning-rate schedule after warmup: linear | cosine | constant | constant_with_warmup"
    )
    bf16: bool = Field(False, description="bf16 autocast over float32 weights (the saved model is float32): worth it on GPUs; on a CPU only with bf16 units (avx512_bf16, AMX), so measure first")
    gradient_checkpointing: bool = Field(False, description="recompute activations in the backward pass to save memory")
    packing: bool = Field(False, description="pack several conversations into each sequence of max_length tokens")
    logging_steps: int = Field(5, ge=1, description="steps between logged metrics")
    save_steps: int = Field(50, ge=1, description="steps between checkpoints")
    save_total_limit: int = Field(2, ge=1, description="checkpoints kept; older ones are deleted")
    seed: int = Field(0, description="seed of the data order, the held-out split and training")
    lora: LoraParams = Field(default_factory=LoraParams, description="LoRA adapters in place of full fine-tuning")
    eval_fraction: float = Field(0.0, ge=0.0, lt=1.0, description="share of the SFT set held out for an eval loss; 0: none")
    cpu_threads: int = Field(
        0, ge=0, description="torch threads when training on CPU; 0 keeps torch's default (small models on a shared machine often run faster on one thread)"
    )
