"""Agent-R1 process rewards: a small score for each tool call, from the ToolEnv's verdicts.

Each call the environment judged gets a verdict by its kind, and a value by its verdict:

    valid informative call (ok, empty result)   informative
    repeated call (same tool, same arguments)   repeated   (default negative)
    invalid call (bad format/arguments/tool)    invalid    (default negative)
    failed call (tool error or injected fault)  failed     (default 0: not the agent's fault)

A domain may refine the verdicts (QA tells informative searches from uninformative
ones). The process reward of a trajectory is the mean value over its calls, clipped
to [-1, 1]; the domain's rubric weighs it beside the outcome.
"""

from __future__ import annotations

import json
from typing import Any

from star.env.core import WORKED

KIND_GROUPS = {"ok": "informative", "empty": "informative", "repeated": "repeated", "invalid": "invalid", "unknown_tool": "invalid", "error": "failed", "fault": "failed"}


def verdicts(call_kinds: list[str]) -> list[str]:
    """The verdict of each call from its kind; a kind no tool should return counts as invalid."""
    return [KIND_GROUPS.get(kind, "invalid") for kind in call_kinds]


def process_reward(call_verdicts: list[str], values: Any) -> float:
    """The mean of `values.<verdict>` over the calls, clipped to [-1, 1]; 0 without calls."""
    if not call_verdicts:
        return 0.0
    mean = sum(getattr(values, v) for v in call_verdicts) / len(call_verdicts)
    return max(-1.0, min(1.0, mean))


def call_kinds(row_calls: list[str]) -> list[str]:
    """Kinds from a trajectory row's `calls` column (JSON strings)."""
    return [json.loads(c)["kind"] for c in row_calls]


def call_breakdown(call_kinds: list[str]) -> dict[str, float]:
    """What went wrong in an episode's calls, kept apart so a fault ablation can be read.

    tool_error_rate: calls that did not work, for any reason; fault_rate: calls
    hit by an injected fault; invalid_rate: calls the policy
    got wrong (no parseable call, unknown tool, bad arguments); error_rate:
    valid calls the tool failed; recovery_rate: faults followed by a call that
    worked (a retry reads as `repeated`), over faults (0 without faults).
    """
    n = max(len(call_kinds), 1)
    faults = [i for i, kind in enumerate(call_kinds) if kind == "fault"]
    recovered = sum(i + 1 < len(call_kinds) and call_kinds[i + 1] in WORKED for i in faults)
    return {
        "tool_error_rate": sum(kind not in WORKED for kind in call_kinds) / n,
        "fault_rate": len(faults) / n,
        "invalid_rate": verdicts(call_kinds).count("invalid") / n,
        "error_rate": call_kinds.count("error") / n,
        "recovery_rate": recovered / len(faults) if faults else 0.0,
    }
