"""Play a policy on TravelPlanner queries, one TravelEnv per query, and keep each episode as a row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from star.agent.policy import play_tasks
from star.agent.rollout import RolloutLimits, Trajectory
from star.env.episode import EpisodeRow
from star.travel.env import TravelEnv
from star.travel.world.query import Query
from star.travel.world.tools import TravelTools


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
    """A policy's episode: truncated as the rollout engine decided, with the tokens it generated."""
    return EpisodeRow.of(
        env, query.idx, query.level, policy, task={"days": query.days}, truncated=trajectory.truncated, completion_tokens=sum(trajectory.completion_mask)
    ).row()
