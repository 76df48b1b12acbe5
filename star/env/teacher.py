"""What a teacher is, in any domain: an agent that plays an episode in a ToolEnv, turn by turn.

Its turns are text in the student's format (`<think>`, then a `<tool_call>` or an
`<answer>`), and each episode draws its own seeds, so results do not depend on
run order or concurrency.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any, Protocol

from star.env.core import ToolEnv


class Teacher(Protocol):
    name: str

    def episode(self, env: ToolEnv, task: Any, rng: random.Random) -> None:
        """Play one episode in `env` (already reset) until it is done."""


def tool_call_text(thought: str, name: str, arguments: dict) -> str:
    call = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<think>{thought}</think>\n<tool_call>{call}</tool_call>"


def answer_text(thought: str, answer: str) -> str:
    return f"<think>{thought}</think>\n<answer>\n{answer}\n</answer>"


def hash_seed(*parts: Any) -> int:
    """A 64-bit seed from any parts (run seed, purpose, task id, sample)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big")
