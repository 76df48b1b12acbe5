"""TravelPlanner's GRPO rewards: named functions of one graded episode, weighed by the `reward` section.

Let e be the `PlanEvaluation` of the plan a trajectory delivered, in any mode:

    cs_micro  = commonsense checks passed / 8
    cs_macro  = 1 if all 8 commonsense checks pass else 0
    hard_micro = hard constraints passed / hard constraints the query sets
                 (budget always, plus each local constraint given; a hard
                 constraint not evaluated counts as failed)
    hard_macro = 1 if every hard constraint passes else 0
    success   = 1 if the plan passes everything (final pass) else 0

    sum        = (cs_micro + cs_macro + hard_micro + hard_macro + success) / 5
    complete_sum = sum for a plan that passes complete_information, else 0: a
                 plan cut short earns nothing for the other checks it passes
    kept_sum   = sum for a plan that keeps every local constraint the query
                 states (transportation, cuisine, room type, house rule), else
                 0. They are checked as strict mode does, also where the
                 official gate leaves them unscored: under sum a plan that
                 drives where the user will not drive (about 0.5) outscores a
                 flight with one mis-copied number (about 0.175, gated)
    macro      = (cs_macro + hard_macro) / 2
    success    = success
    curriculum = sum while step < switch, success from then on, where
                 switch = switch_at when it is an int (a step number) and
                 switch_at * total_steps when it is a float (a fraction).
    process    = Agent-R1's mean value of the episode's calls (star/train/process.py)

Every outcome function lies in [0, 1]. A trajectory with a format error, or
without a deliverable plan (no evaluation, or e.delivered is False), gets 0.
The reward that trains is the sum of weight x function (star/train/rubric.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from star.train.process import call_breakdown, process_reward, verdicts
from star.train.rubric import RewardFunction, Rubric
from star.travel.evaluation.evaluate import PlanEvaluation, evaluate_plan
from star.travel.evaluation.hard import hard_set
from star.travel.plans.format import format_rules
from star.travel.specs import TravelRewardParams
from star.travel.world.query import Query
from star.travel.world.sandbox_index import SandboxIndex


def _usable(evaluation: PlanEvaluation | None) -> bool:
    return evaluation is not None and evaluation.delivered


def sum_reward(evaluation: PlanEvaluation | None) -> float:
    """Dense: the mean of the five official rates for this one plan."""
    if not _usable(evaluation):
        return 0.0
    e = evaluation
    parts = (e.commonsense_micro, float(e.commonsense_pass), e.hard_micro, float(e.hard_pass), float(e.final_pass))
    return sum(parts) / len(parts)


def complete_sum_reward(evaluation: PlanEvaluation | None) -> float:
    """sum, but nothing for a plan that misses information: a plan cut short would otherwise pass most other checks."""
    if not _usable(evaluation) or evaluation.commonsense.get("complete_information") is not True:
        return 0.0
    return sum_reward(evaluation)


def keeps_stated_constraints(query: Query, plan: Any, index: SandboxIndex) -> bool:
    """Whether the plan keeps every local constraint the query states, scored whatever the official gate says."""
    stated = [h for h in hard_set(query) if h != "budget"]  # the local ones; sum already weighs the budget
    if not stated:
        return True
    strict = evaluate_plan(query, plan, index, mode="strict")
    return all(strict.hard[h] is True for h in stated)


def kept_sum_reward(evaluation: PlanEvaluation | None, kept: bool) -> float:
    """sum, but nothing for a plan that breaks a constraint the user stated."""
    return sum_reward(evaluation) if kept else 0.0


def macro_reward(evaluation: PlanEvaluation | None) -> float:
    """Mean of commonsense-all-pass and hard-all-pass: 0, 0.5 or 1."""
    if not _usable(evaluation):
        return 0.0
    return (float(evaluation.commonsense_pass) + float(evaluation.hard_pass)) / 2


def success_reward(evaluation: PlanEvaluation | None) -> float:
    """1 when the plan passes every constraint, else 0."""
    return 1.0 if _usable(evaluation) and evaluation.final_pass else 0.0


def switch_step(total_steps: int, switch_at: float | int) -> float:
    """The step from which the curriculum rewards SUCCESS."""
    if isinstance(switch_at, bool) or not isinstance(switch_at, (int, float)):
        raise TypeError(f"switch_at must be an int step or a float fraction, got {switch_at!r}")
    if isinstance(switch_at, int):
        return switch_at
    if not 0.0 <= switch_at <= 1.0:
        raise ValueError(f"a fractional switch_at must lie in [0, 1], got {switch_at}")
    return switch_at * total_steps


def curriculum_reward(evaluation: PlanEvaluation | None, step: int, total_steps: int = 1, switch_at: float | int = 0.5) -> float:
    """sum before the switch, success from it on."""
    return sum_reward(evaluation) if step < switch_step(total_steps, switch_at) else success_reward(evaluation)


@dataclass
class GradedPlan:
    """One finished episode as the reward functions see it; `evaluation` is None on a format error."""

    query: Query
    env: Any
    evaluation: PlanEvaluation | None
    step: int
    plan: Any = None
    index: SandboxIndex | None = None

    @cached_property
    def kept(self) -> bool:
        """The stated local constraints all kept (kept_sum); computed only when a weighted reward asks."""
        return _usable(self.evaluation) and keeps_stated_constraints(self.query, self.plan, self.index)


def reward_functions(params: TravelRewardParams, total_steps: int) -> dict[str, RewardFunction]:
    """Every reward the `reward` section can weigh, by name."""
    return {
        "sum": lambda g: sum_reward(g.evaluation),
        "complete_sum": lambda g: complete_sum_reward(g.evaluation),
        "kept_sum": lambda g: kept_sum_reward(g.evaluation, g.kept),
        "macro": lambda g: macro_reward(g.evaluation),
        "success": lambda g: success_reward(g.evaluation),
        "curriculum": lambda g: curriculum_reward(g.evaluation, g.step, total_steps, params.switch_at),
        "process": lambda g: process_reward(verdicts([c.kind for c in g.env.calls]), params),
    }


class Scorer:
    """The weighted reward of one finished episode, each weighted function's score, and what the plan passed."""

    def __init__(self, index: SandboxIndex, params: TravelRewardParams, total_steps: int):
        self.index = index
        self.rubric = Rubric(reward_functions(params, total_steps), params.weights)

    def __call__(self, query: Query, env: Any, step: int) -> dict[str, float]:
        plan = format_rules(env.answer, query) if env.answer else None
        evaluation = evaluate_plan(query, plan, self.index) if plan is not None else None
        ok = evaluation is not None and evaluation.delivered
        return {
            "success": float(bool(evaluation and evaluation.final_pass)),
            "delivered": float(ok),
            "commonsense_micro": evaluation.commonsense_micro if ok else 0.0,
            "hard_micro": evaluation.hard_micro if ok else 0.0,
            "turns": float(env.turns),
            **call_breakdown([c.kind for c in env.calls]),
            **self.rubric.score(GradedPlan(query, env, evaluation, step, plan, self.index)),
        }
