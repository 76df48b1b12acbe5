"""SFT hyperparameters, apart from the trainer so that reading a config imports no torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LoraParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    # "all-linear": every linear layer but the LM head, which TRL cannot train through an adapter.
    target_modules: list[str] | Literal["all-linear"] = "all-linear"

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

    learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    num_epochs: float = Field(3.0, gt=0.0)
    max_steps: int = Field(0, ge=0)  # 0: train for num_epochs
    per_device_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_length: int = Field(1536, ge=16)  # longer conversations are cut at the end
    warmup_ratio: float = Field(0.05, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    lr_scheduler: Literal["linear", "cosine", "constant", "constant_with_warmup"] = "cosine"
    bf16: bool = False  # mixed precision; worth it on GPUs, slow on most CPUs
    gradient_checkpointing: bool = False
    packing: bool = False
    logging_steps: int = Field(5, ge=1)
    save_steps: int = Field(50, ge=1)
    save_total_limit: int = Field(2, ge=1)
    seed: int = 0
    lora: LoraParams = Field(default_factory=LoraParams)
    eval_fraction: float = Field(0.0, ge=0.0, lt=1.0)  # 0: no held-out loss
    # Torch threads when training on CPU; 0 keeps torch's default. Small models
    # on a shared machine often run faster on one thread than on two.
    cpu_threads: int = Field(0, ge=0)
