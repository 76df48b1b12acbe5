"""Agent-R1 process rewards: a small score for each tool call, from the ToolEnv's verdicts.

Each call the environment judged gets a value by its kind:

    valid informative call (ok, empty result)   +informative
    repeated call (same tool, same arguments)   +repeated   (default negative)
    invalid call (bad format/arguments/tool)    +invalid    (default negative)
    failed call (tool error or injected fault)  +failed     (default 0: not the agent's fault)

The process reward of a trajectory is the mean over its calls, clipped to
[-1, 1]. The training reward is

    reward = outcome + weight * process

so `weight: 0` turns process rewards off and leaves the outcome reward as is.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

KIND_GROUPS = {"ok": "informative", "empty": "informative", "repeated": "repeated", "invalid": "invalid", "unknown_tool": "invalid", "error": "failed", "fault": "failed"}


class ProcessRewards(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weight: float = Field(0.1, ge=0.0)
    informative: float = 1.0
    repeated: float = -0.5
    invalid: float = -1.0
    failed: float = 0.0


def process_reward(call_kinds: list[str], values: ProcessRewards) -> float:
    if not call_kinds:
        return 0.0
    scores = [getattr(values, KIND_GROUPS.get(kind, "invalid")) for kind in call_kinds]
    return max(-1.0, min(1.0, sum(scores) / len(scores)))


def call_kinds(row_calls: list[str]) -> list[str]:
    """Kinds from a trajectory row's `calls` column (JSON strings)."""
    return [json.loads(c)["kind"] for c in row_calls]
