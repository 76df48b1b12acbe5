"""Generation backends for the rollout engine.

One small interface: `generate(prompts, max_new_tokens, stop, temperature)`
returns, per prompt, the new token ids and their log-probabilities.

- TransformersBackend: batched `model.generate`, token in / token out. It
  keeps the KV cache across turns: a prompt that extends a sequence of the
  previous call prefills only its new tokens. The prefix all prompts of a
  batch share (system prompt and tools) is prefilled and stored once.
- VLLMBackend: in-process vLLM, token in / token out.
- OpenAIBackend: any OpenAI-compatible server (`vllm serve` included). It is
  message based, so it returns text; the engine tokenises it and cannot know
  the server's own tokens or log-probabilities.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from transformers import StoppingCriteria
from transformers.cache_utils import DynamicCache, DynamicLayer

from star.llm_client import make_client, retrying, scrub, transient
from star.service import ServiceError

FinishReason = Literal["eos", "stop", "length"]


@dataclass
class Prompt:
    """One episode's context: its tokens for token backends, its messages for chat servers."""

    token_ids: list[int]
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Generation:
    """One model turn.

    `token_ids` run up to and including the token that ended the turn (an
    eos, or the token completing a stop string). Message-based backends give
    `text` instead, with `token_ids` and `logprobs` None.
    """

    token_ids: list[int] | None
    logprobs: list[float] | None
    finish_reason: FinishReason
    text: str | None = None


class BackendError(ServiceError):
    """A backend could not produce a generation (server unreachable, bad reply)."""


class Backend(Protocol):
    # False for backends that take messages and return text.
    token_level: bool

    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float | None = None,
    ) -> list[Generation]: ...


def end_of_turn(tokenizer: Any, ids: Sequence[int], eos_ids: set[int], stop: Sequence[str]) -> tuple[int, FinishReason]:
    """Where a turn ends in `ids`: (number of tokens kept, why).

    A stop string is found in a window of the last few tokens, the same test
    the stopping criterion applies while generating, so both cut at one place.
    """
    window = _stop_window(stop)
    for j, token in enumerate(ids):
        if token in eos_ids:
            return j + 1, "eos"
        if stop:
            text = tokenizer.decode(ids[max(0, j + 1 - window) : j + 1], skip_special_tokens=False)
            if any(s in text for s in stop):
                return j + 1, "stop"
    return len(ids), "length"


def _stop_window(stop: Sequence[str]) -> int:
    # Every token is at least one byte, so a stop string spans at most this many tokens.
    return max((len(s.encode()) for s in stop), default=0) + 1


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(value)
    if not ids:
        raise ValueError("the tokenizer and model define no eos token; a turn could never end")
    return ids


# -- transformers ---------------------------------------------------------------


class _StopOnStrings(StoppingCriteria):
    """Per-row stopping criterion: a stop string appeared in the new tokens."""

    def __init__(self, tokenizer: Any, stop: Sequence[str], prompt_len: int):
        self.tokenizer = tokenizer
        self.stop = list(stop)
        self.prompt_len = prompt_len
        self.window = _stop_window(stop)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        new = input_ids[:, self.prompt_len :]
        texts = self.tokenizer.batch_decode(new[:, -self.window :], skip_special_tokens=False)
        return torch.tensor([any(s in t for s in self.stop) for t in texts], device=input_ids.device)


class _GrowingLayer(DynamicLayer):
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


_ATTENTION = "star_shared_prefix"
# The shared prefix of each layer, for the attention function; set around one generate call.
_PREFIX: ContextVar[list[tuple[torch.Tensor, torch.Tensor]] | None] = ContextVar("star_shared_prefix", default=None)


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
    prefix_keys, prefix_values = _PREFIX.get()[module.layer_idx]
    b, h, t, d = query.shape
    hkv, s, p = key.shape[1], key.shape[2], prefix_keys.shape[2]
    g = h // hkv  # query heads per key/value head
    scale = scaling if scaling is not None else d**-0.5
    q = (query * scale).reshape(b, hkv, g * t, d)  # scaled here, the smaller tensor
    # All rows' queries against the one prefix: (1, Hkv, B*G*T, P).
    q_all = q.transpose(0, 1).reshape(1, hkv, b * g * t, d)
    prefix_scores = (q_all @ prefix_keys.transpose(-1, -2)).reshape(hkv, b, g, t, p).transpose(0, 1)
    own_scores = (q @ key.transpose(-1, -2)).reshape(b, hkv, g, t, s)
    if attention_mask is not None:
        visible = attention_mask[:, :, :, -s:].unsqueeze(2)  # (B, 1, 1, T, S)
        if visible.dtype != torch.bool:
            visible = visible == 0
    else:  # no padding: causal within the last T slots
        visible = torch.ones((t, s), dtype=torch.bool, device=query.device).tril(s - t)
    own_scores = own_scores.masked_fill(~visible, float("-inf"))
    # The prefix is visible to every query, so no row is fully masked.
    probs = torch.softmax(torch.cat([prefix_scores, own_scores], dim=-1).float(), dim=-1).to(value.dtype)
    prefix_probs = probs[..., :p].transpose(0, 1).reshape(1, hkv, b * g * t, p)
    out = (prefix_probs @ prefix_values).reshape(hkv, b, g * t, d).transpose(0, 1)
    out = out + probs[..., p:].reshape(b, hkv, g * t, s) @ value
    return out.reshape(b, h, t, d).transpose(1, 2).contiguous(), None


def _materialised_sdpa_mask(*args: Any, **kwargs: Any) -> Any:
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def _register_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(_ATTENTION, _shared_prefix_attention)
    AttentionMaskInterface.register(_ATTENTION, _materialised_sdpa_mask)


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
    `_GrowingLayer`). Both apply to models whose layers are all full
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
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id: int = tokenizer.pad_token_id
        # transformers renamed `past_key_values` to `cache` within 5.x; a PEFT wrapper hides the signature.
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self._cache_kw = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        self._rows: _Rows | None = None
        self._calls = 0
        if reuse_cache:
            _register_attention()

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
        self._keep(rows, _cache_of(out), out.sequences, attention_mask, token_lists, new, kept)
        return results

    def _run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, kwargs: dict[str, Any], rows: _Rows) -> Any:
        device = input_ids.device
        config = self.model.config
        previous = config._attn_implementation
        token = None
        if rows.prefix_len:
            token = _PREFIX.set([layer.prefix for layer in rows.cache.layers])
            config._attn_implementation = _ATTENTION
        # Seeded per call on a forked RNG: reproducible, and the caller's RNG is untouched.
        try:
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(self.seed * 1_000_003 + self._calls)
                return self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        finally:
            if token is not None:
                config._attn_implementation = previous
                _PREFIX.reset(token)

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
        cache = _new_cache(self.model)
        rows = _Rows(cache, empty, empty, [[] for _ in range(n)])
        shared = _common_prefix(token_lists)[: min(len(ids) for ids in token_lists) - 1]
        if not self.reuse_cache or cache is None or n < 2 or len(shared) < self.min_shared_prefix:
            return rows
        # A fresh batch: prefill the prefix all prompts share once, with the model's own attention.
        prefix_cache = _new_cache(self.model)
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
        if not self.reuse_cache or not _growing(cache):
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


def _new_cache(model: Any) -> Any:
    """An empty cache of growing layers, or None for models whose layers are not all plain full attention."""
    cache = DynamicCache(config=model.config)
    if not cache.layers or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None
    cache.layers = [_GrowingLayer() for _ in cache.layers]
    return cache


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


def _growing(cache: Any) -> bool:
    return isinstance(cache, DynamicCache) and all(type(layer) is _GrowingLayer for layer in cache.layers)


def _common_prefix(token_lists: list[list[int]]) -> list[int]:
    first = token_lists[0]
    n = min(len(ids) for ids in token_lists)
    for ids in token_lists[1:]:
        k = 0
        while k < n and ids[k] == first[k]:
            k += 1
        n = k
    return first[:n]


# -- vLLM -------------------------------------------------------------------------


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


# -- OpenAI-compatible servers -----------------------------------------------------


class OpenAIBackend:
    """Chat completions on an OpenAI-compatible server, one request per episode.

    Message based: the server renders and tokenises the conversation itself,
    so the trajectory holds our tokenisation of the returned text (all mask 1)
    and no log-probabilities. The tools go with each request with
    `tool_choice="none"`, so the server writes them into the prompt and leaves
    `<tool_call>` text in the content for the environment to parse. Tool
    results go as the env records them, `tool` messages without a
    `tool_call_id`: vLLM's server takes them, OpenAI's own API does not.
    """

    token_level = False

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 1.0,
        max_tokens: int | None = None,
        timeout: float = 60.0,
        retries: int = 2,
        concurrency: int = 16,
        top_p: float = 1.0,
    ):
        self.base_url = base_url
        self.model = model
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.retries = retries
        self.timeout = timeout
        self.concurrency = concurrency
        self.api_key_env = api_key_env
        # The key itself is never logged or put in errors.
        self.client = make_client(base_url, api_key_env, timeout)

    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int,
        stop: Sequence[str] = (),
        temperature: float | None = None,
    ) -> list[Generation]:
        if not prompts:
            return []
        temp = self.temperature if temperature is None else temperature
        limit = min(max_new_tokens, self.max_tokens or max_new_tokens)
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts))) as pool:
            return list(pool.map(lambda p: self._one(p, limit, stop, temp), prompts))

    def _one(self, prompt: Prompt, max_tokens: int, stop: Sequence[str], temperature: float) -> Generation:
        import openai

        request: dict[str, Any] = dict(
            model=self.model,
            messages=prompt.messages,
            temperature=temperature,
            top_p=self.top_p,
            max_tokens=max_tokens,
        )
        if stop:
            request["stop"] = list(stop)
        if prompt.tools:
            request.update(tools=prompt.tools, tool_choice="none")
        attempts = retrying(f"server at {self.base_url}", self.retries, self.timeout)
        try:
            response = attempts(self.client.chat.completions.create, **request)
        except (openai.APIConnectionError, openai.APIStatusError) as exc:
            # A server may echo the request's key in its error body.
            if transient(exc):
                raise BackendError(
                    f"no reply from the OpenAI-compatible server at {self.base_url} after {self.retries + 1} attempts "
                    f"({type(exc).__name__}: {scrub(str(exc), self.api_key_env)}). Is it running?"
                ) from None
            status = getattr(exc, "status_code", None)
            raise BackendError(f"server at {self.base_url} refused the request ({status}): {scrub(exc.message, self.api_key_env)}") from None
        except json.JSONDecodeError:
            raise BackendError(f"server at {self.base_url} sent a reply that is not JSON") from None
        if not response.choices:
            raise BackendError(f"server at {self.base_url} returned no choices")
        choice = response.choices[0]
        text = choice.message.content or ""
        # A server that parsed tool calls out anyway: write them back as the text the env reads.
        for call in choice.message.tool_calls or []:
            call_json = json.dumps({"name": call.function.name, "arguments": call.function.arguments})
            text += f"<tool_call>{call_json}</tool_call>"
        if choice.finish_reason == "length":
            return Generation(None, None, "length", text)
        # Servers drop the matched stop string from the text; put it back so the turn reads as written.
        matched = (choice.model_extra or {}).get("stop_reason")  # vLLM says which one matched
        if isinstance(matched, str):
            return Generation(None, None, "stop", text + matched)
        for s in stop:
            opening = "<" + s[2:] if s.startswith("</") else None
            if opening and text.count(opening) > text.count(s):
                return Generation(None, None, "stop", text + s)
        return Generation(None, None, "eos", text)


# -- factory ----------------------------------------------------------------------


def make_backend(kind: Literal["transformers", "openai", "vllm"], **kwargs: Any) -> Backend:
    """A backend by name. For "transformers", `model` may be a path; the tokenizer is then loaded beside it."""
    if kind == "transformers":
        model = kwargs.pop("model")
        tokenizer = kwargs.pop("tokenizer", None)
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("make_backend('transformers') needs a tokenizer with a model object")
        return TransformersBackend(model, tokenizer, **kwargs)
    if kind == "openai":
        return OpenAIBackend(**kwargs)
    if kind == "vllm":
        return VLLMBackend(**kwargs)
    raise ValueError(f"unknown backend {kind!r}; use 'transformers', 'openai' or 'vllm'")
