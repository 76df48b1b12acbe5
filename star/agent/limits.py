"""The limits of one episode, the one schema that infer, GRPO and the rollout engine share (no logic)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class RolloutLimits(BaseModel):
    """When a turn or an episode ends. InferParams and GRPOParams are these plus their own knobs."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(12, ge=1, le=200, description="turns per episode")
    max_new_tokens: int = Field(256, ge=1, description="tokens per turn")
    max_total_tokens: int = Field(2048, ge=64, description="prompt and completion tokens per episode")
    # A model that has lost the format rarely finds it again, and an untrained one would otherwise write to the token limit.
    max_invalid_turns: int = Field(0, ge=0, description="consecutive unparseable turns that end an episode (0: no limit)")

    @classmethod
    def of(cls, settings: BaseModel, **overrides: Any) -> RolloutLimits:
        """Just the limits of a stage's settings (which may hold more), with `overrides` applied."""
        return cls(**{**settings.model_dump(include=set(cls.model_fields)), **overrides})
