"""VLLMBackend: in-process vLLM, token in / token out."""

from __future__ import annotations

import os
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
    """

    token_level = True
    cpu_kv_cache_bytes = 2 << 30

    def __init__(self, model: str, temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, **llm_kwargs: Any):
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise ImportError(
                "VLLMBackend needs vLLM, which is not installed: install the `gpu` extra (pip install -e '.[gpu]'), "
                "or use .venv-vllm, vLLM's CPU build (make vllm)"
            ) from exc
        if current_platform.is_cpu():
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
                llm_kwargs.setdefault("kv_cache_memory_bytes", self.cpu_kv_cache_bytes)
        # Log-probabilities after temperature, as TRL's GRPO expects them.
        llm_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        # One engine seed, not a per-request one: a per-request seed would make
        # identical prompts (a GRPO group) sample identical completions.
        self.llm = LLM(model=model, seed=seed, **llm_kwargs)
        self.temperature = temperature
        self.top_p = top_p

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
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in token_lists], params, use_tqdm=False)
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
