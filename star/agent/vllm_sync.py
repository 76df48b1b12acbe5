"""Training weights into a running vLLM engine, in place, after every optimizer step.

The engine runs in the trainer's process (vLLM's in-process engine core and
one worker), so the weights travel as tensors, never through a file or a
socket. `WeightSync` is vLLM's worker extension: `llm.collective_rpc` calls
its method inside the worker, which loads the tensors through the model's own
`load_weights` (the checkpoint loader: it knows the fused qkv and gate/up
layouts, tied embeddings and dtype casts).

On a GPU that is all. vLLM's CPU build does one thing more after loading: it
packs each linear layer's weight for oneDNN (or its small-GEMM kernel) and
replaces `layer.weight` with an empty tensor, so a second load has nowhere to
go. For an engine that will be trained, `keep_cpu_weights` leaves the unpacked
weight in place, and after each load the worker runs the same packing again
from the new weight. The cost is one extra copy of the weights in memory, on
CPU only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

QUALNAME = "star.agent.vllm_sync.WeightSync"


class WeightSync:
    """vLLM worker extension (`LLM(worker_extension_cls=QUALNAME)`): load new weights in place."""

    def load_trained_weights(self, weights: list[tuple[str, Any]]) -> int:
        """Load (Hugging Face name, tensor) pairs into the served model; returns how many were given."""
        from vllm.platforms import current_platform

        model = self.model_runner.model  # type: ignore[attr-defined]
        model.load_weights(weights=iter(weights))
        if current_platform.is_cpu():
            repack_cpu_linears(model)
        return len(weights)


def repack_cpu_linears(model: Any) -> int:
    """Build each CPU linear layer's packed GEMM again from its (new) weight; returns the layers packed."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    packed = 0
    for module in model.modules():
        if hasattr(module, "cpu_linear") and getattr(module, "weight", None) is not None and not getattr(module, "_cpu_skip_gemm_dispatch", False):
            if module.weight.numel() == 0:
                raise RuntimeError(f"{type(module).__name__} lost its weight when vLLM packed it: create the engine under keep_cpu_weights()")
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
            packed += 1
    return packed


@contextlib.contextmanager
def keep_cpu_weights() -> Iterator[None]:
    """While a CPU engine loads, pack its linear layers without dropping their weights (see the module's doc)."""
    from vllm.model_executor.layers import utils

    original = utils.dispatch_cpu_unquantized_gemm

    def keep(layer: Any, remove_weight: bool) -> None:
        original(layer, remove_weight=False)

    utils.dispatch_cpu_unquantized_gemm = keep  # linear.py imports it from `utils` at each call
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = original


def trained_weights(model: Any) -> list[tuple[str, Any]]:
    """The trainer model's weights as vLLM's loader takes them: Hugging Face names, detached tensors."""
    return [(n, p.detach()) for n, p in model.named_parameters()]
