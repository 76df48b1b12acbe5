"""Rollouts of tool-using agents: the batched multi-turn engine and its generation backends."""

from star.agent.backend import Backend, BackendError, Generation, Prompt, make_backend
from star.agent.hf_backend import TransformersBackend
from star.agent.openai_backend import OpenAIBackend
from star.agent.rollout import STOP_STRINGS, EnvInfo, RolloutLimits, TemplateError, Trajectory, run_episodes
from star.agent.vllm_backend import VLLMBackend

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
