"""What generates GRPO's rollouts: the trained model itself, or a vLLM engine kept in sync with it.

A sampler gives the rollout engine a backend for one step's episodes
(`backend(seed)`, used inside `rolling()`), and takes the trainer's weights
after each optimizer step (`sync(model)`); `close()` releases it when training ends. The trainer (star/train/offpolicy.py)
calls `sync` before the first rollout of every step, a resumed run's first
included, so the sampler always plays the weights the trainer holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from star.train.grpo_params import GRPOParams


class TrainerSampler:
    """Rollouts from the model being trained, through the transformers backend: nothing to copy."""

    def __init__(self, policy: Any, tokenizer: Any, temperature: float):
        self.policy, self.tokenizer, self.temperature = policy, tokenizer, temperature

    def sync(self, model: Any) -> None:
        pass  # the backend generates with the trainer's own weights

    def close(self) -> None:
        pass

    @contextlib.contextmanager
    def rolling(self) -> Iterator[None]:
        was_training = self.policy.training
        self.policy.eval()
        try:
            yield
        finally:
            self.policy.train(was_training)

    def backend(self, seed: int) -> Any:
        from star.agent.hf_backend import TransformersBackend

        return TransformersBackend(self.policy, self.tokenizer, temperature=self.temperature, seed=seed)


class VLLMSampler:
    """Rollouts from one vLLM engine for the whole stage, its weights replaced in place (star/agent/vllm_sync.py)."""

    def __init__(self, model_path: str, params: GRPOParams):
        from vllm.platforms import current_platform

        from star.agent.vllm_backend import VLLMBackend

        engine = params.vllm
        cpu = current_platform.is_cpu()
        memory = {"kv_cache_memory_bytes": engine.kv_cache_bytes} if cpu else {"gpu_memory_utilization": engine.gpu_memory_utilization}
        self.sleeps = engine.sleep and not cpu  # vLLM's sleep mode frees GPU memory; a CPU engine has none to free
        from transformers import AutoConfig

        # An episode stops starting turns at max_total_tokens; its last turn adds up to max_new_tokens.
        longest = params.max_total_tokens + params.max_new_tokens
        positions = getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None) or longest
        self.engine = VLLMBackend(
            model_path, temperature=params.temperature, seed=params.seed, trainable=True, dtype=engine.dtype, enforce_eager=engine.enforce_eager,
            max_model_len=min(longest, positions), enable_sleep_mode=self.sleeps, **memory,
        )
        self.asleep = False

    def _wake(self) -> None:
        if self.asleep:
            self.engine.wake_up()
            self.asleep = False

    def sync(self, model: Any) -> None:
        self._wake()
        self.engine.load_weights(model)

    @contextlib.contextmanager
    def rolling(self) -> Iterator[None]:
        self._wake()
        try:
            yield
        finally:
            if self.sleeps:
                self.engine.sleep()
                self.asleep = True

    def backend(self, seed: int) -> Any:
        self.engine.reseed(seed)
        return self.engine

    def close(self) -> None:
        self.engine.close()


def make_sampler(params: GRPOParams, policy: Any, tokenizer: Any, model_path: str) -> TrainerSampler | VLLMSampler:
    if params.backend == "vllm":
        return VLLMSampler(model_path, params)
    return TrainerSampler(policy, tokenizer, params.temperature)
