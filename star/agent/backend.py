"""The interface of the rollout engine's generation backends, and a factory.

One small interface: `generate(prompts, max_new_tokens, stop, temperature)`
returns, per prompt, the new token ids and their log-probabilities. The
backends:

- TransformersBackend (star.agent.hf_backend): batched `model.generate`,
  token in / token out, with a KV cache kept across turns
  (star.agent.prefix_cache).
- VLLMBackend (star.agent.vllm_backend): in-process vLLM, token in / token out.
- OpenAIBackend (star.agent.openai_backend): any OpenAI-compatible server
  (`vllm serve` included). It is message based, so it returns text; the
  engine tokenises it and cannot know the server's own tokens or
  log-probabilities.

A new backend is one module with a `BACKEND` class that follows `Backend` and is
made as `BACKEND(model=<model directory>, tokenizer=..., temperature=..., top_p=...,
seed=...)`: `make_backend("mypackage.mybackend", ...)`, or `infer.backend:
mypackage.mybackend` in params.yaml.
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

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
    strings = stop_strings(tokenizer, stop)
    for j, token in enumerate(ids):
        if token in eos_ids:
            return j + 1, "eos"
        if stop and strings.could_end(token) and strings.completes(ids, j):
            return j + 1, "stop"
    return len(ids), "length"


class StopStrings:
    """Tests where a stop string completes, decoding only at tokens that could complete one.

    Decoding a window of tokens at every position is most of the cost of
    finding a stop. A token can complete an ASCII stop string only if its own
    text holds the string's last character (an ASCII byte is never part of a
    multi-byte character), so only those positions are decoded. Stop strings
    with other characters are tested at every position.
    """

    def __init__(self, tokenizer: Any, stop: Sequence[str]):
        self.tokenizer = tokenizer
        self.stop = list(stop)
        # Every token is at least one byte, so a stop string spans at most this many tokens.
        self.window = max((len(s.encode()) for s in stop), default=0) + 1
        self.ends: list[bool] | None = None  # None: any token may complete one
        if stop and all(s.isascii() for s in stop):
            last = {s[-1] for s in stop}
            texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=False)
            self.ends = [any(c in t for c in last) for t in texts]

    def could_end(self, token: int) -> bool:
        return self.ends is None or token >= len(self.ends) or self.ends[token]

    def completes(self, ids: Sequence[int], j: int) -> bool:
        """Whether the tokens up to and including `ids[j]` end with a stop string in their last window."""
        text = self.tokenizer.decode(ids[max(0, j + 1 - self.window) : j + 1], skip_special_tokens=False)
        return any(s in text for s in self.stop)


_STOP_STRINGS: weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], StopStrings]] = weakref.WeakKeyDictionary()


def stop_strings(tokenizer: Any, stop: Sequence[str]) -> StopStrings:
    """The StopStrings of this tokenizer and these strings, made once."""
    per_tokenizer = _STOP_STRINGS.setdefault(tokenizer, {})
    key = tuple(stop)
    if key not in per_tokenizer:
        per_tokenizer[key] = StopStrings(tokenizer, stop)
    return per_tokenizer[key]


def eos_token_ids(model: Any, tokenizer: Any) -> set[int]:
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


BUILTIN = ("transformers", "openai", "vllm")


def make_backend(kind: str, **kwargs: Any) -> Backend:
    """A backend by name (a built-in one, or a module path holding `BACKEND`). For "transformers", `model` may
    be a path; the tokenizer is then loaded beside it."""
    # Imported here so that a backend's dependencies (torch, vLLM) load only when it is made.
    if kind == "transformers":
        from star.agent.hf_backend import TransformersBackend

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
        from star.agent.openai_backend import OpenAIBackend

        return OpenAIBackend(**kwargs)
    if kind == "vllm":
        from star.agent.vllm_backend import VLLMBackend

        return VLLMBackend(**kwargs)
    if "." in kind:
        backend = getattr(importlib.import_module(kind), "BACKEND", None)
        if backend is None:
            raise ValueError(f"{kind} has no BACKEND (a class that follows star.agent.backend.Backend)")
        return backend(**kwargs)
    raise ValueError(f"unknown backend {kind!r}; use one of {', '.join(BUILTIN)} or a module path holding BACKEND")
