"""Run a policy on tasks of any domain: the rollout engine over one ToolEnv per task, in batches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from star.agent.backends import Generation, Prompt
from star.agent.rollout import RolloutLimits, Trajectory, run_episodes
from star.env.core import ToolEnv, arguments_json
from star.travel.env import TravelEnv
from star.travel.query import Query
from star.travel.tools import TravelTools


class ForcedPrefix:
    """A backend that replays given assistant turns first, then lets `inner` generate.

    Used to branch episodes from a shared prefix: the same actions are
    replayed (their observations may differ where faults are injected), and
    the episode continues from there. Prefixes are keyed by the user message.
    """

    def __init__(self, inner: Any, tokenizer: Any, prefixes: dict[str, list[str]]):
        self.inner, self.tokenizer, self.prefixes = inner, tokenizer, prefixes
        self.token_level = inner.token_level
        self.eos_ids = getattr(inner, "eos_ids", None)
        self.reset = getattr(inner, "reset", None)

    def _forced(self, prompt: Prompt) -> str | None:
        user = next((m["content"] for m in prompt.messages if m["role"] == "user"), "")
        done = sum(m["role"] == "assistant" for m in prompt.messages)
        prefix = self.prefixes.get(user, [])
        return prefix[done] if done < len(prefix) else None

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int, stop: Sequence[str] = (), temperature: float | None = None) -> list[Generation]:
        forced = [self._forced(p) for p in prompts]
        rest = [p for p, f in zip(prompts, forced) if f is None]
        generated = iter(self.inner.generate(rest, max_new_tokens, stop, temperature) if rest else [])
        out = []
        for f in forced:
            if f is None:
                out.append(next(generated))
            else:
                ids = self.tokenizer.encode(f, add_special_tokens=False) + [self.tokenizer.eos_token_id]
                out.append(Generation(ids, [0.0] * len(ids), "eos"))
        return out


def play_tasks(
    backend: Any,
    tokenizer: Any,
    make_env: Callable[[Any, int], ToolEnv],
    tasks: Sequence[Any],
    limits: RolloutLimits,
    *,
    batch_size: int,
    seed: int = 0,
    tools_in_prompt: bool = False,
    prefixes: Sequence[list[str]] | None = None,
    progress: bool = True,
) -> list[tuple[Any, ToolEnv, Trajectory]]:
    """Play each task once in its own env, `make_env(task, seed)`, any domain.

    `prefixes[i]` (assistant turns) is replayed before task i samples.
    """
    envs = [make_env(task, seed) for task in tasks]
    if prefixes is not None:
        firsts = [env.prompt(task) for env, task in zip(envs, tasks)]
        backend = ForcedPrefix(backend, tokenizer, dict(zip(firsts, prefixes)))
    out = []
    for start in range(0, len(tasks), batch_size):
        batch, batch_envs = list(tasks[start : start + batch_size]), envs[start : start + batch_size]
        trajectories = run_episodes(backend, tokenizer, batch_envs, batch, limits, tools=None if tools_in_prompt else [], progress=progress)
        out += list(zip(batch, batch_envs, trajectories))
    return out


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
        "tool_errors": sum(c.kind not in ("ok", "empty", "repeated") for c in env.calls),
        "truncated": trajectory.truncated,
        "answer": env.answer,
        "completion_tokens": sum(trajectory.completion_mask),
        "calls": [arguments_json({"name": c.name, "arguments": c.arguments, "kind": c.kind}) for c in env.calls],
    }
