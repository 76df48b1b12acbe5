"""The rollout engine: many episodes at once against ToolEnvs, token in / token out.

Each episode keeps one running token list: the prompt (system with tools and
the user's task, rendered by the tokenizer's chat template with the
generation prompt), then per turn the model's tokens (mask 1) and the tokens
the template writes for the environment's reply and the next generation
prompt (mask 0). Those template tokens come from rendering the conversation
with and without the new messages and tokenising the difference, so the list
equals `apply_chat_template(env.history, tools=...)` of the whole episode
whenever the model's tokens are the ones the tokenizer would give for its text
(always true for text a message-based backend returns, and for expert turns).

A turn ends at the eos token, which is then the model's own (mask 1), or at
a stop string (`</tool_call>`, `</answer>`). After a stop string, and after a
turn cut by `max_new_tokens`, the engine appends the `<|im_end|>` the template
writes as a mask-0 token: the model did not sample it, so it has no
log-probability and is not trained on. (A model with several eos tokens that
ends on one other than the template's end-of-turn token keeps it, mask 1, and
the list then holds one token more than the re-rendering.)

Limits: `max_new_tokens` cuts a turn, which the environment still judges
(usually a format error) before the episode goes on. `max_turns` and
`max_total_tokens` end the episode, marked truncated; no turn starts once the
list reaches `max_total_tokens`, though the environment's last reply may run
past it. So does a run of `max_invalid_turns` unparseable turns, if set. The
environment also truncates at its own `max_turns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from star.agent.backend import Backend, BackendError, Generation, Prompt, end_of_turn
from star.agent.limits import RolloutLimits
from star.env.core import ToolEnv

STOP_STRINGS = ("</tool_call>", "</answer>")


class TemplateError(ValueError):
    """The chat template rewrote earlier text, so a running token list cannot match it."""


@dataclass
class EnvInfo:
    calls: list[list[str]] = field(default_factory=list)  # tool-call kinds per step
    infos: list[dict[str, Any]] = field(default_factory=list)  # StepResult.info per step


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]  # env.history
    prompt_ids: list[int]
    completion_ids: list[int]  # everything after the prompt
    completion_mask: list[int]  # 1 = sampled by the model, 0 = template or observation
    logprobs: list[float] | None  # per completion token, 0.0 where mask is 0; None if the backend gave none
    answer: str | None
    truncated: bool
    turns: int
    env: EnvInfo
    finish_reasons: list[str] = field(default_factory=list)  # per turn: eos | stop | length

    @property
    def token_ids(self) -> list[int]:
        return self.prompt_ids + self.completion_ids


class _Renderer:
    def __init__(self, tokenizer: Any, tools: list[dict[str, Any]]):
        self.tokenizer = tokenizer
        self.tools = tools or None

    def text(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools, tokenize=False, add_generation_prompt=generation_prompt
        )

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)


class _Episode:
    def __init__(
        self,
        env: ToolEnv,
        task: Any,
        tokenizer: Any,
        limits: RolloutLimits,
        token_level: bool,
        tools: list[dict[str, Any]] | None,
    ):
        self.env = env
        self.tokenizer = tokenizer
        self.limits = limits
        env.reset(task)
        self.tools = env.tool_schemas() if tools is None else tools
        self.render = _Renderer(tokenizer, self.tools)
        self.text = self.render.text(env.history, True)
        self.ids = self.render.encode(self.text)
        self.prompt_len = len(self.ids)
        self.mask: list[int] = []
        self.logprobs: list[float] | None = [] if token_level else None
        self.info = EnvInfo()
        self.finish: list[str] = []
        self.invalid_run = 0  # consecutive turns the env could not parse
        # A prompt already over the budget never gets a turn.
        self.truncated = self.prompt_len >= limits.max_total_tokens
        self.active = not self.truncated and not env.done

    def budget(self) -> int:
        return min(self.limits.max_new_tokens, self.limits.max_total_tokens - len(self.ids))

    def prompt(self) -> Prompt:
        return Prompt(list(self.ids), list(self.env.history), self.tools)

    def advance(self, gen: Generation, budget: int, eos_ids: set[int], stop: Sequence[str]) -> None:
        """Feed one generated turn to the env and extend the token list."""
        if gen.token_ids is None:
            # Message based: our tokens for the server's text; the template closes the turn.
            content = gen.text or ""
            model_ids = self.render.encode(content)
            model_logprobs: list[float] | None = None
            own_eos = False
            finish = gen.finish_reason
        else:
            model_ids = list(gen.token_ids[:budget])
            model_logprobs = list(gen.logprobs[:budget]) if gen.logprobs is not None else [0.0] * len(model_ids)
            finish = gen.finish_reason
            if len(gen.token_ids) > budget:  # cut to this episode's share of a shared call
                finish = end_of_turn(self.tokenizer, model_ids, eos_ids, stop)[1]
            own_eos = finish == "eos"
            content_ids = model_ids[:-1] if own_eos else model_ids
            content = self.tokenizer.decode(content_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        self.finish.append(finish)

        before = len(self.env.history)
        result = self.env.step(content)
        self.info.calls.append(list(result.info.get("calls", [])))
        self.info.infos.append(result.info)

        # What the template writes after the model's text: the end of the assistant
        # turn, then the env's reply (and the next generation prompt if it goes on).
        through = self.render.text(self.env.history[: before + 1], False)
        head = self.text + content
        if not through.startswith(head):
            raise TemplateError("the chat template does not render the assistant turn verbatim after the prompt")
        self.invalid_run = self.invalid_run + 1 if result.info.get("kind") == "invalid" else 0
        lost = 0 < self.limits.max_invalid_turns <= self.invalid_run
        keep_going = not self.env.done and self.env.turns < self.limits.max_turns and not lost
        eos = model_ids[-1] if own_eos else None
        after, full = self._after(through, head, keep_going, eos)
        if keep_going and len(self.ids) + len(model_ids) + len(after) >= self.limits.max_total_tokens:
            keep_going = False
            after, full = self._after(through, head, False, eos)

        self.ids += model_ids + after
        self.mask += [1] * len(model_ids) + [0] * len(after)
        if self.logprobs is not None:
            self.logprobs += (model_logprobs or [0.0] * len(model_ids)) + [0.0] * len(after)
        self.text = full
        if not keep_going:
            self.active = False
            # Ended by a limit rather than by an answer: ours, or the env's own max_turns.
            self.truncated = self.env.truncated or self.env.answer is None

    def _after(self, through: str, head: str, generation_prompt: bool, eos: int | None) -> tuple[list[int], str]:
        full = self.render.text(self.env.history, generation_prompt)
        if not full.startswith(through):
            raise TemplateError("the chat template is not prefix-preserving: new messages changed earlier text")
        ids = self.render.encode(through[len(head) :] + full[len(through) :])
        if eos is not None and ids and ids[0] == eos:
            ids = ids[1:]  # the template's end-of-turn token is the model's own eos
        return ids, full

    def trajectory(self) -> Trajectory:
        return Trajectory(
            messages=list(self.env.history),
            prompt_ids=self.ids[: self.prompt_len],
            completion_ids=self.ids[self.prompt_len :],
            completion_mask=list(self.mask),
            logprobs=self.logprobs,
            answer=self.env.answer,
            truncated=self.truncated,
            turns=self.env.turns,
            env=self.info,
            finish_reasons=self.finish,
        )


def run_episodes(
    backend: Backend,
    tokenizer: Any,
    envs: Sequence[ToolEnv],
    tasks: Sequence[Any],
    limits: RolloutLimits | None = None,
    *,
    stop: Sequence[str] = STOP_STRINGS,
    tools: Sequence[dict[str, Any]] | None = None,
    progress: bool = True,
) -> list[Trajectory]:
    """Play one episode per (env, task), all at once: one backend call per turn for every live episode.

    `tools` replaces `env.tool_schemas()` in the prompt, to render exactly
    what a model was trained on (the same schemas, or [] for none).
    """
    limits = limits or RolloutLimits()
    if len(envs) != len(tasks):
        raise ValueError(f"{len(envs)} envs for {len(tasks)} tasks")
    if len({id(env) for env in envs}) != len(envs):
        raise ValueError("every episode needs its own env object")
    token_level = getattr(backend, "token_level", True)
    eos_ids = set(getattr(backend, "eos_ids", None) or {tokenizer.eos_token_id})
    reset = getattr(backend, "reset", None)
    if reset is not None:
        reset()  # a kept KV cache may be from older weights
    schemas = None if tools is None else list(tools)
    episodes = [_Episode(env, task, tokenizer, limits, token_level, schemas) for env, task in zip(envs, tasks)]

    bar = tqdm(total=len(episodes), desc="rollout", unit="episode", disable=not progress)
    bar.update(sum(not ep.active for ep in episodes))
    turns = 0
    try:
        while active := [ep for ep in episodes if ep.active]:
            budgets = [ep.budget() for ep in active]
            gens = backend.generate([ep.prompt() for ep in active], max(budgets), stop)
            if len(gens) != len(active):
                raise BackendError(f"backend returned {len(gens)} generations for {len(active)} prompts")
            for ep, gen, budget in zip(active, gens, budgets):
                ep.advance(gen, budget, eos_ids, stop)
                bar.update(0 if ep.active else 1)
            turns += len(active)
            bar.set_postfix(turns=turns)
    finally:
        bar.close()
        if reset is not None:
            reset()  # free the cache
    return [ep.trajectory() for ep in episodes]
