"""Rollouts of tool-using agents: the batched multi-turn engine and its generation backends."""

from star.agent.backends import (
    Backend,
    BackendError,
    Generation,
    OpenAIBackend,
    Prompt,
    TransformersBackend,
    VLLMBackend,
    make_backend,
)
from star.agent.rollout import STOP_STRINGS, EnvInfo, RolloutLimits, TemplateError, Trajectory, run_episodes

__all__ = [
    "STOP_STRINGS",
    "Backend",
    "BackendError",
    "EnvInfo",
    "Generation",
    "OpenAIBackend",
    "Prompt",
    "RolloutLimits",
    "TemplateError",
    "Trajectory",
    "TransformersBackend",
    "VLLMBackend",
    "make_backend",
    "run_episodes",
]
