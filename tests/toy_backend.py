"""A generation backend in one module, for tests: every turn answers at once, token in / token out.

`infer.backend: tests.toy_backend` plays a policy with it; nothing outside this file knows it exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from star.agent.backend import Generation, Prompt
from star.env.teacher import answer_text

ANSWER = "000"


class AnswerAtOnce:
    token_level = True

    def __init__(self, model: str, tokenizer: Any, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0):
        self.ids = tokenizer.encode(answer_text("I answer without looking.", ANSWER), add_special_tokens=False) + [tokenizer.eos_token_id]

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = (), temperature: float | None = None) -> list[Generation]:
        ids = self.ids[:max_new_tokens]
        return [Generation(list(ids), [0.0] * len(ids), "eos" if len(ids) == len(self.ids) else "length") for _ in prompts]


BACKEND = AnswerAtOnce
