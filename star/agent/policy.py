"""Run a policy on tasks of any domain: the rollout engine over one ToolEnv per task, in batches."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from star.agent.backend import Generation, Prompt
from star.agent.rollout import RolloutLimits, Trajectory, run_episodes
from star.env.core import ToolEnv


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
