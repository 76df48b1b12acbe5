"""One played episode as a row of trajectories.jsonl: the one schema and the one builder every domain uses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from star.env.core import ToolEnv, arguments_json, tool_errors


class EpisodeRow(BaseModel):
    """A row's fields in the order they are written; a field a row was not given is left out of it."""

    model_config = ConfigDict(extra="forbid")

    query_id: int | str = Field(description="the task's id in its split")
    level: str = Field(description="the task's difficulty level")
    task: dict[str, Any] = Field(description="the domain's own task fields, written after level: travel's days, QA's hops, kind and source")
    sample: int = Field(description="which of the teacher's samples of this task (0 for a policy)")
    teacher: str = Field(description="who played it: the teacher's name or the policy's")
    messages: list[dict[str, Any]] = Field(description="the conversation: system, user, then assistant and tool turns")
    tools: str | None = Field(None, description="the tools' JSON schemas as the chat template renders them (SFT data)")
    turns: int = Field(description="assistant turns")
    tool_calls: int = Field(description="turns that named a tool")
    tool_errors: int = Field(description="calls that did not work, for any reason")
    truncated: bool = Field(description="cut by a limit before an answer")
    answer: str | None = Field(description="the final answer's text; None when there was none")
    plan: Any = Field(None, description="travel: the delivered plan in the submission format")
    evaluation: Any = Field(None, description="the domain's evaluation of the answer")
    success: bool | None = Field(None, description="the answer passes the domain's evaluation")
    completion_tokens: int | None = Field(None, description="tokens the policy generated")
    calls: list[str] = Field(description="each call's name, arguments and verdict kind, as canonical JSON")

    @classmethod
    def of(cls, env: ToolEnv, query_id: int | str, level: str, teacher: str, sample: int = 0, task: dict[str, Any] | None = None, **fields: Any) -> EpisodeRow:
        """The row of a finished episode in `env`; `fields` sets the optional ones (and may override `truncated`)."""
        played = dict(
            messages=env.history, turns=env.turns, tool_calls=sum(c.name != "" for c in env.calls), tool_errors=tool_errors(env.calls),
            truncated=env.truncated, answer=env.answer, calls=[arguments_json({"name": c.name, "arguments": c.arguments, "kind": c.kind}) for c in env.calls],
        )
        return cls(query_id=query_id, level=level, task=task or {}, sample=sample, teacher=teacher, **{**played, **fields})

    def row(self) -> dict[str, Any]:
        data = self.model_dump(exclude_unset=True)
        first = {"query_id": data.pop("query_id"), "level": data.pop("level")}
        return {**first, **data.pop("task"), **data}
