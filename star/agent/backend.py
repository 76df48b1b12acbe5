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
"""

from __future__ import annotations

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
    window = stop_window(stop)
    for j, token in enumerate(ids):
        if token in eos_ids:
            return j + 1, "eos"
        if stop:
            text = tokenizer.decode(ids[max(0, j + 1 - window) : j + 1], skip_special_tokens=False)
            if any(s in text for s in stop):
                return j + 1, "stop"
    return len(ids), "length"


def stop_window(stop: Sequence[str]) -> int:
    # Every token is at least one byte, so a stop string spans at most this many tokens.
    return max((len(s.encode()) for s in stop), default=0) + 1


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


def make_backend(kind: Literal["transformers", "openai", "vllm"], **kwargs: Any) -> Backend:
    """A backend by name. For "transformers", `model` may be a path; the tokenizer is then loaded beside it."""
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
    raise ValueError(f"unknown backend {kind!r}; use 'transformers', 'openai' or 'vllm'")
