"""GRPO with a sampler that is not the trainer: the weight sync, the mismatch measured, and its correction.

TRL keeps what a separate sampler needs behind its own vLLM switch
(`use_vllm`): a weight sync before the first generation after each optimizer
step, and truncated importance sampling against the sampler's
log-probabilities. `SamplerGRPOTrainer` turns that machinery on for the
project's rollout function, with the sampler's `sync` in place of TRL's vLLM
client, and measures every step, on the tokens that train, the sampler's
log-probabilities against those the update's own forward pass computes (no
extra pass):

- `mismatch_abs`: the mean |log p_trainer - log p_sampler|;
- `mismatch_kl`: KL(sampler || trainer), estimated from the sampled tokens
  with the k3 estimator (r - 1 - log r, r = p_trainer / p_sampler);
- `mismatch_max_ratio`: the largest p_trainer / p_sampler of a token;
- `mismatch_tokens`: how many tokens they cover (0: none trained, and the
  three read 0, 0 and 1).

With the transformers backend the sampler is the trained model itself and
these sit near 0 (only kernel and padding numerics differ); with vLLM they
show what its kernels and dtype cost. `importance_correction: tis` multiplies
each token's loss by min(r, cap), TRL's `token_truncate` (which recomputes the
trainer's log-probabilities in a forward pass before the update); `none`
leaves TRL's on-policy loss as it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from trl import GRPOTrainer


def mismatch(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The sampler/trainer mismatch over the tokens where `mask` is set (tokens without a sampler log-probability, NaN, are left out)."""
    keep = mask.bool() & ~torch.isnan(sampler_logps)
    log_ratio = (trainer_logps - sampler_logps)[keep].double()
    if log_ratio.numel() == 0:  # nothing trains this step (every episode cut and masked): nothing to compare
        return {"mismatch_abs": 0.0, "mismatch_kl": 0.0, "mismatch_max_ratio": 1.0, "mismatch_tokens": 0}
    return {
        "mismatch_tokens": log_ratio.numel(),
        "mismatch_abs": log_ratio.abs().mean().item(),
        "mismatch_kl": (log_ratio.exp() - 1 - log_ratio).mean().item(),
        "mismatch_max_ratio": log_ratio.max().exp().item(),
    }


class _Sync:
    """Stands where TRL keeps its vLLM client: TRL calls `sync_weights` when the step has changed."""

    def __init__(self, sync: Callable[[], None]):
        self.sync_weights = sync


class SamplerGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose `rollout_func` samples elsewhere: synced each step, its mismatch appended to `stats`."""

    def __init__(self, *args: Any, sync: Callable[[Any], None], correction: str, cap: float, stats: dict[str, list[float]], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.use_vllm = True  # TRL's switch for the machinery above; its own engine is never made
        self.vllm_generation = _Sync(lambda: self._timed_sync(sync))
        self._last_loaded_step = -1  # sync before the first rollout, a resumed run's too
        self.vllm_importance_sampling_correction = correction == "tis"
        self.vllm_importance_sampling_mode = "token_truncate"
        self.vllm_importance_sampling_clip_min = None
        self.vllm_importance_sampling_clip_max = cap
        self.sampler_stats = stats
        self._measuring: dict[str, Any] | None = None

    def _timed_sync(self, sync: Callable[[Any], None]) -> None:
        start = time.perf_counter()
        sync(self.accelerator.unwrap_model(self.model))
        self.sampler_stats["sync_seconds"].append(time.perf_counter() - start)

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        self._measuring = inputs
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._measuring = None

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        inputs, self._measuring = self._measuring, None  # the loss's own pass, the first one it makes
        if inputs is not None and "sampling_per_token_logps" in inputs:
            mask = inputs["completion_mask"] * inputs["tool_mask"] if "tool_mask" in inputs else inputs["completion_mask"]
            for name, value in mismatch(out[0].detach(), inputs["sampling_per_token_logps"], mask).items():
                self.sampler_stats[name].append(value)
        return out
