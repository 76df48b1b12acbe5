"""Play a policy on TravelPlanner queries, one TravelEnv per query, and keep each episode as a row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from star.agent.policy import play_tasks
from star.agent.rollout import RolloutLimits, Trajectory
from star.env.core import arguments_json, tool_errors
from star.travel.env import TravelEnv
from star.travel.query import Query
from star.travel.tools import TravelTools


def play(
    backend: Any,
    tokenizer: Any,
    tools: TravelTools,
    queries: Sequence[Query],
    limits: RolloutLimits,
    *,
    fault_rate: float = 0.0,
    **kwargs: Any,
) -> list[tuple[Query, TravelEnv, Trajectory]]:
    """Play each TravelPlanner query once (see `play_tasks`)."""

    def make_env(query: Query, seed: int) -> TravelEnv:
        return TravelEnv(tools, max_turns=limits.max_turns, fault_rate=fault_rate, seed=seed + query.idx)

    return play_tasks(backend, tokenizer, make_env, queries, limits, **kwargs)


def trajectory_row(query: Query, env: TravelEnv, trajectory: Trajectory, policy: str) -> dict[str, Any]:
    return {
        "query_id": query.idx,
        "level": query.level,
        "days": query.days,
        "sample": 0,
        "teacher": policy,
        "messages": env.history,
        "turns": env.turns,
        "tool_calls": sum(c.name != "" for c in env.calls),
        "tool_errors": tool_errors(env.calls),
        "truncated": trajectory.truncated,
        "answer": env.answer,
        "completion_tokens": sum(trajectory.completion_mask),
        "calls": [arguments_json({"name": c.name, "arguments": c.arguments, "kind": c.kind}) for c in env.calls],
    }
