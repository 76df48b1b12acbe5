"""Parse one assistant turn: <think>, <tool_call>{json}</tool_call>, <answer>.

Never raises: whatever the text, the result is an Action, with `error` set
when the turn cannot be acted on.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.S)
_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)
_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.S)


@dataclass
class ToolCall:
    name: str
    arguments: Any


@dataclass
class Action:
    think: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    answer: str | None = None
    error: str | None = None


def _call(raw: str) -> ToolCall | str:
    """A ToolCall, or the reason the JSON is unusable."""
    try:
        obj = json.loads(raw.strip())
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        return f"tool call is not valid JSON ({getattr(exc, 'msg', type(exc).__name__)})"
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return 'tool call needs {"name": ..., "arguments": {...}}'
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # some servers send arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (json.JSONDecodeError, RecursionError, ValueError):
            return "tool call arguments are not valid JSON"
    return ToolCall(obj["name"], arguments)


def parse_action(text: Any) -> Action:
    if not isinstance(text, str):
        return Action(error="assistant turn is not text")
    think = _THINK.search(text)
    action = Action(think=think.group(1).strip() if think else None)
    # An answer ends the episode, so it wins over a call in the same turn.
    answer = _ANSWER.search(text)
    if answer:
        action.answer = answer.group(1).strip()
        return action
    for raw in _CALL.findall(text):
        parsed = _call(raw)
        if isinstance(parsed, str):
            action.error = parsed
            action.tool_calls = []
            return action
        action.tool_calls.append(parsed)
    return action
