"""Tool instability: wrap a Tool so a seeded fraction of calls fail realistically."""

from __future__ import annotations

import random
from typing import Any

from star.env.core import Tool, ToolResult

FAULTS = (
    "Error: request timed out after 30 s. Please retry.",
    "Error: 503 Service Unavailable. Please retry.",
    "Error: 429 Too Many Requests. Please retry.",
    "No results (the service returned an empty response).",
)


class FaultyTool(Tool):
    """Behaves like `tool`, except that with probability `rate` a call returns a fault."""

    def __init__(self, tool: Tool, rate: float, rng: random.Random):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be in [0, 1], got {rate}")
        self.inner = tool
        self.fn = tool.fn
        self.name, self.description, self.parameters = tool.name, tool.description, tool.parameters
        self.rate = rate
        self.rng = rng

    def execute(self, args: Any) -> ToolResult:
        # Draw on every call, so the fault pattern depends only on the seed and call count.
        if self.rng.random() < self.rate:
            return ToolResult(self.rng.choice(FAULTS), False, "fault")
        return self.inner.execute(args)


def with_faults(tools: list[Tool], rate: float, seed: int) -> list[Tool]:
    if rate <= 0:
        return tools
    rng = random.Random(seed)
    return [FaultyTool(t, rate, rng) for t in tools]
