"""The KV cache that TransformersBackend keeps across calls, with a shared prefix.

The prefix all prompts of a batch share (system prompt and tools) is
prefilled and stored once, as a batch of one; each row's cache holds only
its own tokens, in buffers that grow by doubling. A custom attention
function, registered with transformers under `ATTENTION`, reads the prefix
once for all rows at each decoding step; a prefill (a few per turn) copies
it into each row for torch's fused attention.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    """A cache layer for one batch of rows that share a prefix.

    The shared prefix (system prompt and tools) is held once, as a batch of
    one, in `prefix`; the cache proper holds each row's own tokens. Decoding
    reads the whole cache at every step, so not copying the prefix into every
    row is most of the speed of a large batch.

    The buffers grow by doubling: DynamicLayer concatenates on every step,
    which copies the whole cache per new token.
    """

    prefix: tuple[torch.Tensor, torch.Tensor] | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        need = n + key_states.shape[-2]
        buffer = getattr(self, "_buffer", None)
        if buffer is None or n == 0 or self.keys.data_ptr() != buffer[0].data_ptr() or need > buffer[0].shape[-2]:
            buffer = self._allocate(key_states, value_states, need)
        buffer[0][:, :, n:need] = key_states
        buffer[1][:, :, n:need] = value_states
        self.keys, self.values = buffer[0][:, :, :need], buffer[1][:, :, :need]
        return self.keys, self.values

    def _allocate(self, key_states: torch.Tensor, value_states: torch.Tensor, need: int):
        b, h, _, d = key_states.shape
        size = max(2 * need, 64)
        buffer = (key_states.new_empty((b, h, size, d)), value_states.new_empty((b, h, size, value_states.shape[-1])))
        n = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        if n:
            buffer[0][:, :, :n] = self.keys
            buffer[1][:, :, :n] = self.values
        self._buffer = buffer
        return buffer

    def take(self, rows: torch.Tensor, slots: torch.Tensor | None) -> None:
        """Keep these rows, and these slots of them."""
        keys, values = self.keys.index_select(0, rows), self.values.index_select(0, rows)
        if slots is not None:
            keys, values = keys.index_select(2, slots), values.index_select(2, slots)
        self.keys, self.values = keys, values  # copied into a growing buffer on the next update


ATTENTION = "star_shared_prefix"
# The shared prefix of each layer, for the attention function; set around one generate call.
PREFIX: ContextVar[list[tuple[torch.Tensor, torch.Tensor]] | None] = ContextVar("star_shared_prefix", default=None)


def _shared_prefix_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention over [shared prefix | row's own tokens], the prefix read once for all rows.

    query (B, H, T, D); key, value (B, Hkv, S, D); the prefix (1, Hkv, P, D),
    fully visible to every query. The mask covers the S own slots.
    """
    prefix_keys, prefix_values = PREFIX.get()[module.layer_idx]
    b, h, t, d = query.shape
    hkv, s, p = key.shape[1], key.shape[2], prefix_keys.shape[2]
    scale = scaling if scaling is not None else d**-0.5
    if attention_mask is not None:
        visible = attention_mask[:, :, :, -s:]  # (B, 1, T, S)
        if visible.dtype != torch.bool:
            visible = visible == 0
    else:  # no padding: causal within the last T slots
        visible = torch.ones((t, s), dtype=torch.bool, device=query.device).tril(s - t).expand(b, 1, t, s)
    if t > 1:
        return _prefill_attention(query, key, value, prefix_keys, prefix_values, visible, scale), None
    g = h // hkv  # query heads per key/value head
    q = (query * scale).reshape(b, hkv, g * t, d)  # scaled here, the smaller tensor
    # All rows' queries against the one prefix: (1, Hkv, B*G*T, P).
    q_all = q.transpose(0, 1).reshape(1, hkv, b * g * t, d)
    prefix_scores = (q_all @ prefix_keys.transpose(-1, -2)).reshape(hkv, b, g, t, p).transpose(0, 1)
    own_scores = (q @ key.transpose(-1, -2)).reshape(b, hkv, g, t, s)
    own_scores = own_scores.masked_fill(~visible.unsqueeze(2), float("-inf"))
    # The prefix is visible to every query, so no row is fully masked.
    probs = torch.softmax(torch.cat([prefix_scores, own_scores], dim=-1).float(), dim=-1).to(value.dtype)
    prefix_probs = probs[..., :p].transpose(0, 1).reshape(1, hkv, b * g * t, p)
    out = (prefix_probs @ prefix_values).reshape(hkv, b, g * t, d).transpose(0, 1)
    out = out + probs[..., p:].reshape(b, hkv, g * t, s) @ value
    return out.reshape(b, h, t, d).transpose(1, 2).contiguous(), None


# Rows whose copied prefix keys and values fit in about this many elements are prefilled together.
_PREFILL_ELEMENTS = 1 << 24


def _prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    prefix_keys: torch.Tensor,
    prefix_values: torch.Tensor,
    visible: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Prefill of many query tokens per row: torch's fused attention, the prefix copied into each row.

    A prefill runs a few times per turn, with T queries per row, so copying
    the prefix costs little beside what the fused kernel saves over
    materialised scores. Rows go through in chunks, to bound the copies.
    """
    b, h, t, d = query.shape
    hkv, p = key.shape[1], prefix_keys.shape[2]
    per_row = 2 * hkv * (p + key.shape[2]) * d
    step = max(1, _PREFILL_ELEMENTS // per_row)
    outs = []
    for i in range(0, b, step):
        n = min(step, b - i)
        keys = torch.cat([prefix_keys.expand(n, -1, -1, -1), key[i : i + n]], dim=2)
        values = torch.cat([prefix_values.expand(n, -1, -1, -1), value[i : i + n]], dim=2)
        mask = torch.cat([visible.new_ones((n, 1, t, p)), visible[i : i + n]], dim=-1)
        outs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[i : i + n], keys, values, attn_mask=mask, scale=scale, enable_gqa=hkv != h
            )
        )
    return torch.cat(outs).transpose(1, 2).contiguous()


def _materialised_sdpa_mask(*args: Any, **kwargs: Any) -> Any:
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, _shared_prefix_attention)
    AttentionMaskInterface.register(ATTENTION, _materialised_sdpa_mask)


def new_cache(model: Any) -> Any:
    """An empty cache of growing layers, or None for models whose layers are not all plain full attention."""
    cache = DynamicCache(config=model.config)
    if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache


def cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def is_growing(cache: Any) -> bool:
    return isinstance(cache, DynamicCache) and all(type(layer) is GrowingLayer for layer in cache.layers)


def common_prefix(token_lists: list[list[int]]) -> list[int]:
    first = token_lists[0]
    n = min(len(ids) for ids in token_lists)
    for ids in token_lists[1:]:
        k = 0
        while k < n and ids[k] == first[k]:
            k += 1
        n = k
    return first[:n]
