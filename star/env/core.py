"""Agent-R1's split: a Tool reports what happened, a ToolEnv decides what it means."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from star.env.parse import parse_action


class ToolError(Exception):
    """Raised inside a tool function to return an error observation."""


@dataclass(frozen=True)
class ToolResult:
    content: str
    ok: bool = True
    # ok | empty | invalid (bad arguments) | error (tool failed) | fault (injected)
    kind: str = "ok"


class Tool:
    """A named function with an OpenAI-format JSON schema. Never raises."""

    def __init__(self, fn: Callable[..., str], name: str | None = None):
        from transformers.utils import get_json_schema  # lazily: reading a config need not load transformers

        schema = get_json_schema(fn)["function"]
        self.fn = fn
        self.name = name or schema["name"]
        self.description: str = schema["description"]
        self.parameters: dict[str, Any] = schema["parameters"]

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def execute(self, args: Any) -> ToolResult:
        if not isinstance(args, dict):
            return ToolResult(f"Error: arguments of {self.name} must be a JSON object.", False, "invalid")
        props = self.parameters.get("properties", {})
        for key in self.parameters.get("required", []):
            if key not in args:
                return ToolResult(f"Error: {self.name} needs argument '{key}'.", False, "invalid")
        for key, value in args.items():
            if key not in props:
                return ToolResult(f"Error: {self.name} has no argument '{key}'.", False, "invalid")
            if props[key].get("type") == "string" and not isinstance(value, str):
                return ToolResult(f"Error: argument '{key}' must be a string.", False, "invalid")
        try:
            content = self.fn(**args)
        except ToolError as exc:
            return ToolResult(f"Error: {exc}", False, "invalid")
        except Exception as exc:  # a broken tool is an observation, not a crash
            return ToolResult(f"Error: {self.name} failed ({type(exc).__name__}).", False, "error")
        if isinstance(content, ToolResult):
            return content
        return ToolResult(content, True, "ok")


@dataclass
class StepResult:
    observation: str
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    # chat messages this step adds after the assistant turn (tool results or a correction)
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CallRecord:
    name: str
    arguments: Any
    content: str
    kind: str  # a ToolResult kind, plus "unknown_tool" and "repeated"


# The call kinds that worked: the tool answered (a repeat answers again). Any other kind is a tool error.
WORKED = ("ok", "empty", "repeated")


def tool_errors(calls: list[CallRecord]) -> int:
    """Calls of an episode that did not work, for any reason."""
    return sum(c.kind not in WORKED for c in calls)


class ToolEnv:
    """Owns tools and a task; turns assistant text into observations.

    Subclasses write the task's first message in `prompt`; the domain's rubric judges
    the finished episode. `history` is the episode as OpenAI chat messages.
    """

    system_prompt = ""

    def __init__(self, tools: list[Tool], max_turns: int = 12):
        # Alphabetical, the order TRL's environment_factory uses, so every
        # rendering of the tool list (SFT, GRPO, serving) is the same.
        self.tools = {t.name: t for t in sorted(tools, key=lambda t: t.name)}
        self.max_turns = max_turns
        self.reset_state()

    def reset_state(self) -> None:
        self.history: list[dict[str, Any]] = []
        self.turns = 0
        self.calls: list[CallRecord] = []
        self.answer: str | None = None
        self.done = False
        self.truncated = False

    def prompt(self, task: Any) -> str:
        return str(task)

    def reset(self, task: Any) -> str:
        self.reset_state()
        self.task = task
        first = self.prompt(task)
        if self.system_prompt:
            self.history.append({"role": "system", "content": self.system_prompt})
        self.history.append({"role": "user", "content": first})
        return first

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def step(self, assistant_text: Any) -> StepResult:
        if self.done:
            return StepResult("Error: the episode has ended.", done=True, info={"kind": "after_done"})
        result = self._step(assistant_text)
        self.history.append({"role": "assistant", "content": assistant_text if isinstance(assistant_text, str) else ""})
        self.history.extend(result.messages)
        return result

    def _step(self, assistant_text: Any) -> StepResult:
        self.turns += 1
        action = parse_action(assistant_text)
        if action.answer is not None:
            self.answer = action.answer
            self.done = True
            return StepResult("", done=True, info={"kind": "answer"})
        if action.error is not None or not action.tool_calls:
            text = f"Error: {action.error or 'no tool call or answer found'}. Call one tool as <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call> or finish with <answer>...</answer>."
            self.calls.append(CallRecord("", None, text, "invalid"))
            result = StepResult(text, info={"kind": "invalid", "calls": ["invalid"]}, messages=[{"role": "user", "content": text}])
        else:
            records = [self._run(call.name, call.arguments) for call in action.tool_calls]
            messages = [{"role": "tool", "name": r.name, "content": r.content} for r in records]
            result = StepResult(
                "\n".join(r.content for r in records),
                info={"kind": "tool", "calls": [r.kind for r in records]},
                messages=messages,
            )
        if self.turns >= self.max_turns:
            self.done = self.truncated = True
            result.done = True
            result.info["truncated"] = True
        return result

    def _run(self, name: str, arguments: Any) -> CallRecord:
        seen = any(c.name == name and c.arguments == arguments for c in self.calls)
        tool = self.tools.get(name)
        if tool is None:
            known = ", ".join(self.tools)
            record = CallRecord(name, arguments, f"Error: unknown tool '{name}'. Tools: {known}.", "unknown_tool")
        else:
            result = tool.execute(arguments)
            kind = "repeated" if seen and result.ok else result.kind
            record = CallRecord(name, arguments, result.content, kind)
        self.calls.append(record)
        return record


def arguments_json(arguments: Any) -> str:
    """Canonical JSON of tool arguments (stored as strings so tables never merge keys)."""
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)
