"""Teacher distillation: run a teacher in TravelEnv, one trajectory per (query, sample).

A trajectory row holds the episode as OpenAI chat messages (tool calls as
`<tool_call>` text, exactly what the student will generate), the tool
schemas as a JSON string, and metadata: the formatted plan and its
evaluation, turns, tool errors.
"""

from __future__ import annotations

import json
import random
from typing import Any

from star.env.episode import EpisodeRow
from star.env.teacher import Teacher, answer_text, hash_seed, tool_call_text
from star.travel.env import TravelEnv
from star.travel.evaluation.evaluate import evaluate_plan
from star.travel.planner.expert import Expert
from star.travel.plans.format import format_rules
from star.travel.world.query import Query
from star.travel.world.sandbox_index import SandboxIndex
from star.travel.world.tools import TravelTools


def make_teacher(params: Any) -> Teacher:
    """The teacher of `params` (star.config.TeacherParams): the scripted expert or an OpenAI-compatible model."""
    if params.kind == "openai":
        from star.travel.planner.openai_teacher import OpenAITeacher

        return OpenAITeacher(params.openai)
    return ExpertTeacher(Expert(params.mistake_rate, params.top_k, params.upgrade_prob))


class ExpertTeacher:
    name = "expert"

    def __init__(self, expert: Expert):
        self.expert = expert

    def episode(self, env: TravelEnv, query: Query, rng: random.Random) -> None:
        # One turn is kept for the answer, so the episode is never cut off mid-search.
        cap = env.max_turns - 1
        script = self.expert.script(query, rng, max_calls=cap if self.expert.max_calls is None else min(cap, self.expert.max_calls))
        try:
            call = next(script)
            while not env.done:
                result = env.step(tool_call_text(call.thought, call.name, call.arguments))
                call = script.send(result.observation)
        except StopIteration as stop:
            answer = stop.value
            env.step(answer_text(answer.thought, answer.text or "No plan."))


def trajectory_row(env: TravelEnv, query: Query, teacher: str, sample: int, index: SandboxIndex) -> dict[str, Any]:
    """A teacher's episode, with its plan and the plan's evaluation."""
    plan = format_rules(env.answer, query) if env.answer else None
    evaluation = evaluate_plan(query, plan, index) if plan is not None else None
    return EpisodeRow.of(
        env, query.idx, query.level, teacher, sample, task={"days": query.days},
        tools=json.dumps(env.tool_schemas()),  # key order as the template renders it
        plan=plan.to_submission() if plan is not None else None,
        evaluation=evaluation.to_dict() if evaluation is not None else None,
        success=bool(evaluation and evaluation.final_pass),
    ).row()


def run_episode(
    teacher: Teacher,
    tools: TravelTools,
    index: SandboxIndex,
    query: Query,
    sample: int,
    *,
    seed: int,
    max_turns: int,
    fault_rate: float,
) -> dict[str, Any]:
    # Every episode has its own seeds, so results do not depend on run order or concurrency.
    env = TravelEnv(tools, max_turns=max_turns, fault_rate=fault_rate, seed=hash_seed(seed, "faults", query.idx, sample))
    env.reset(query)
    teacher.episode(env, query, random.Random(hash_seed(seed, "teacher", query.idx, sample)))
    return trajectory_row(env, query, teacher.name, sample, index)
