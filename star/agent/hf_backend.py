"""TransformersBackend: batched `model.generate` on any causal LM, token in / token out.

It keeps the KV cache across turns: a prompt that extends a sequence of the
previous call prefills only its new tokens. The prefix all prompts of a
batch share (system prompt and tools) is prefilled and stored once (see
star.agent.prefix_cache).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import StoppingCriteria

from star.agent.backend import Generation, Prompt, end_of_turn, eos_token_ids, stop_strings
from star.agent.prefix_cache import ATTENTION, PREFIX, cache_of, common_prefix, is_growing, new_cache, register_attention


class _StopOnStrings(StoppingCriteria):
    """Per-row stopping criterion: a stop string appeared in the new tokens."""

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_len: int):
        self.strings = stop_strings(tokenizer, stop)
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        window = input_ids[:, max(self.prompt_len, input_ids.shape[1] - self.strings.window) :]
        for i, token in enumerate(window[:, -1].tolist()):
            if self.strings.could_end(token):
                done[i] = self.strings.completes(window[i].tolist(), window.shape[1] - 1)
        return done


@dataclass
class _Rows:
    """The KV cache of one batch: a shared prefix, then one row per sequence, with holes.

    `ids` and `mask` cover the rows' own cache slots; mask 0 marks padding
    and the slots a finished row kept filling. `tokens` are each row's real
    tokens, the shared prefix included.
    """

    cache: Any
    ids: torch.Tensor
    mask: torch.Tensor
    tokens: list[list[int]]
    prefix_len: int = 0


class TransformersBackend:
    """Batched `model.generate` with left padding, on any causal LM.

    Log-probabilities are those of the sampled tokens under the
    temperature-scaled distribution (before top-p), the quantity GRPO's
    importance ratio needs; greedy decoding uses temperature 1 for them.

    The KV cache is kept across calls: a prompt that extends a sequence of
    the previous call only prefills its new tokens. A fresh batch prefills
    the prefix all its prompts share once and keeps it once (see
    `star.agent.prefix_cache`). Both apply to models whose layers are all full
    attention; others get a plain `generate` each call.
    """

    token_level = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        reuse_cache: bool = True,
        min_shared_prefix: int = 16,
    ):
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer needs a pad token for batched generation")
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.reuse_cache = reuse_cache
        self.min_shared_prefix = min_shared_prefix
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.pad_id: int = tokenizer.pad_token_id
        # transformers renamed `past_key_values` to `cache` within 5.x; a PEFT wrapper hides the signature.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._cache_kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        self._rows: _Rows | None = None
        self._calls = 0
        if reuse_cache:
            register_attention()

    def reset(self) -> None:
        """Drop the kept KV cache (call after the weights change)."""
        self._rows = None

    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[Prompt] | Sequence[Sequence[int]],
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float | None = None,
    ) -> list[Generation]:
        token_lists = [list(p.token_ids) if isinstance(p, Prompt) else list(p) for p in prompts]
        if not token_lists:
            return []
        if any(not ids for ids in token_lists):
            raise ValueError("every prompt needs at least one token")
        temp = self.temperature if temperature is None else temperature
        device = self.model.device
        rows = self._start(token_lists, device)
        suffixes = [ids[len(cached) :] for ids, cached in zip(token_lists, rows.tokens)]
        width = max(len(s) for s in suffixes)
        new_ids = torch.full((len(token_lists), width), self.pad_id, dtype=torch.long, device=device)
        new_mask = torch.zeros((len(token_lists), width), dtype=torch.long, device=device)
        for i, s in enumerate(suffixes):
            new_ids[i, width - len(s) :] = torch.tensor(s, dtype=torch.long, device=device)
            new_mask[i, width - len(s) :] = 1
        input_ids = torch.cat([rows.ids, new_ids], dim=1)
        attention_mask = torch.cat([rows.mask, new_mask], dim=1)
        # Positions count real tokens only, after the shared prefix.
        position_ids = (rows.prefix_len + attention_mask.cumsum(dim=1) - 1).clamp(min=0)

        kwargs: dict[str, Any] = dict(
            max_new_tokens=max_new_tokens,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
            return_dict_in_generate=True,
            output_logits=True,
            use_cache=True,
            position_ids=position_ids,
        )
        if temp > 0:
            kwargs.update(do_sample=True, temperature=temp, top_p=self.top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stop:
            kwargs["stopping_criteria"] = [_StopOnStrings(self.tokenizer, stop, input_ids.shape[1])]
        if rows.cache is not None:
            kwargs[self._cache_kw] = rows.cache  # otherwise generate makes its own
        self._calls += 1
        out = self._run(input_ids, attention_mask, kwargs, rows)

        prompt_len = input_ids.shape[1]
        new = out.sequences[:, prompt_len:]
        scale = temp if temp > 0 else 1.0
        logprobs = torch.stack(
            [
                torch.log_softmax(step.float() / scale, dim=-1).gather(1, new[:, t : t + 1]).squeeze(1)
                for t, step in enumerate(out.logits)
            ],
            dim=1,
        )
        results, kept = [], []
        for i in range(len(token_lists)):
            ids = new[i].tolist()
            n, reason = end_of_turn(self.tokenizer, ids, self.eos_ids, stop)
            results.append(Generation(ids[:n], logprobs[i, :n].tolist(), reason))
            kept.append(n)
        self._keep(rows, cache_of(out), out.sequences, attention_mask, token_lists, new, kept)
        return results

    def _run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, kwargs: dict[str, Any], rows: _Rows) -> Any:
        device = input_ids.device
        config = self.model.config
        previous = config._attn_implementation
        token = None
        if rows.prefix_len:
            token = PREFIX.set([layer.prefix for layer in rows.cache.layers])
            config._attn_implementation = ATTENTION
        # Seeded per call on a forked RNG: reproducible, and the caller's RNG is untouched.
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(self.seed * 1_000_003 + self._calls)
                return self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        finally:
            if token is not None:
                config._attn_implementation = previous
                PREFIX.reset(token)

    # -- KV cache across calls ------------------------------------------------

    def _start(self, token_lists: list[list[int]], device: torch.device) -> _Rows:
        """The cache to continue from, and the tokens of each prompt it holds."""
        n = len(token_lists)
        previous, self._rows = self._rows, None
        if self.reuse_cache and previous is not None:
            match = self._match(previous, token_lists)
            if match is not None:
                return self._select(previous, match)
        empty = torch.zeros((n, 0), dtype=torch.long, device=device)
        cache = new_cache(self.model)
        rows = _Rows(cache, empty, empty, [[] for _ in range(n)])
        shared = common_prefix(token_lists)[: min(len(ids) for ids in token_lists) - 1]
        if not self.reuse_cache or cache is None or n < 2 or len(shared) < self.min_shared_prefix:
            return rows
        # A fresh batch: prefill the prefix all prompts share once, with the model's own attention.
        prefix_cache = new_cache(self.model)
        ids = torch.tensor([shared], dtype=torch.long, device=device)
        self.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True, **{self._cache_kw: prefix_cache})
        for layer, filled in zip(cache.layers, prefix_cache.layers):
            layer.prefix = (filled.keys, filled.values)
        return _Rows(cache, empty, empty, [list(shared) for _ in range(n)], len(shared))

    @staticmethod
    def _match(rows: _Rows, token_lists: list[list[int]]) -> list[int] | None:
        """For each prompt, the distinct kept row it extends; None unless all do."""
        taken: set[int] = set()
        match = []
        for ids in token_lists:
            found = None
            for r, tokens in enumerate(rows.tokens):
                n = len(tokens)
                # Rows share their start (the system prompt), so compare the end first.
                if r in taken or n >= len(ids) or ids[max(0, n - 16) : n] != tokens[-16:] or ids[:n] != tokens:
                    continue
                found = r
                break
            if found is None:
                return None
            taken.add(found)
            match.append(found)
        return match

    @staticmethod
    def _select(rows: _Rows, match: list[int]) -> _Rows:
        index = torch.tensor(match, dtype=torch.long, device=rows.ids.device)
        ids, mask = rows.ids[index], rows.mask[index]
        # Drop slots that are holes in every remaining row, so finished episodes cost nothing.
        keep = mask.bool().any(dim=0)
        slots = None if bool(keep.all()) else keep.nonzero().squeeze(1)
        for layer in rows.cache.layers:
            layer.take(index, slots)
        if slots is not None:
            ids, mask = ids[:, slots], mask[:, slots]
        return _Rows(rows.cache, ids, mask, [rows.tokens[r] for r in match], rows.prefix_len)

    def _keep(
        self,
        rows: _Rows,
        cache: Any,
        sequences: torch.Tensor,
        attention_mask: torch.Tensor,
        token_lists: list[list[int]],
        new: torch.Tensor,
        kept: list[int],
    ) -> None:
        if not self.reuse_cache or not is_growing(cache):
            return
        # The last sampled token is never fed back, so the cache is one slot short of `sequences`.
        if cache.get_seq_length() != sequences.shape[1] - 1:
            return
        fed = new.shape[1] - 1
        gen_mask = torch.zeros((len(kept), fed), dtype=attention_mask.dtype, device=attention_mask.device)
        tokens = []
        for i, n in enumerate(kept):
            # A finished row went on feeding padding; only its own tokens count.
            real = min(n, fed)
            gen_mask[i, :real] = 1
            tokens.append(token_lists[i] + new[i, :real].tolist())
        mask = torch.cat([attention_mask, gen_mask], dim=1)
        self._rows = _Rows(cache, sequences[:, :-1], mask, tokens, rows.prefix_len)
