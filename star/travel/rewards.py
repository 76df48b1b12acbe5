"""TravelPlanner's GRPO rewards: outcome rewards from one plan's evaluation, and the episode scorer.

Let e be the `PlanEvaluation` of the plan a trajectory delivered, in any mode:

    cs_micro  = commonsense checks passed / 8
    cs_macro  = 1 if all 8 commonsense checks pass else 0
    hard_micro = hard constraints passed / hard constraints the query sets
                 (budget always, plus each local constraint given; a hard
                 constraint not evaluated counts as failed)
    hard_macro = 1 if every hard constraint passes else 0
    success   = 1 if the plan passes everything (final pass) else 0

    SUM       = (cs_micro + cs_macro + hard_micro + hard_macro + success) / 5
    MACRO     = (cs_macro + hard_macro) / 2
    SUCCESS   = success
    CURRICULUM(step) = SUM while step < switch, SUCCESS from then on, where
                switch = switch_at when it is an int (a step number) and
                switch_at * total_steps when it is a float (a fraction).

Every reward lies in [0, 1]. A trajectory with a format error, or without a
deliverable plan (no evaluation, or e.delivered is False), gets 0.
"""

from __future__ import annotations

from typing import Any

from star.train.grpo_params import GRPOParams
from star.train.process import call_breakdown, process_reward
from star.travel.evaluate import PlanEvaluation, evaluate_plan
from star.travel.format import format_rules
from star.travel.query import Query
from star.travel.sandbox_index import SandboxIndex

SUM = "sum"
MACRO = "macro"
SUCCESS = "success"
CURRICULUM = "curriculum"
KINDS = (SUM, MACRO, SUCCESS, CURRICULUM)


def _usable(evaluation: PlanEvaluation | None) -> bool:
    return evaluation is not None and evaluation.delivered


def sum_reward(evaluation: PlanEvaluation | None) -> float:
    """Dense: the mean of the five official rates for this one plan."""
    if not _usable(evaluation):
        return 0.0
    e = evaluation
    parts = (e.commonsense_micro, float(e.commonsense_pass), e.hard_micro, float(e.hard_pass), float(e.final_pass))
    return sum(parts) / len(parts)


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


def curriculum_kind(step: int, total_steps: int = 1, switch_at: float | int = 0.5) -> str:
    """SUM before the switch, SUCCESS from it on."""
    return SUM if step < switch_step(total_steps, switch_at) else SUCCESS


def outcome_reward(
    kind: str,
    evaluation: PlanEvaluation | None,
    step: int = 0,
    total_steps: int = 1,
    switch_at: float | int = 0.5,
) -> float:
    """The reward of one trajectory; `evaluation` is None on a format error."""
    kind = kind.lower()
    if kind == CURRICULUM:
        kind = curriculum_kind(step, total_steps, switch_at)
    if kind == SUM:
        return sum_reward(evaluation)
    if kind == MACRO:
        return macro_reward(evaluation)
    if kind == SUCCESS:
        return success_reward(evaluation)
    raise ValueError(f"unknown reward kind {kind!r}; expected one of {KINDS}")


class Scorer:
    """Outcome + process reward of one finished episode, with its sub-metrics."""

    def __init__(self, index: SandboxIndex, params: GRPOParams):
        self.index = index
        self.params = params

    def __call__(self, query: Query, env: Any, step: int) -> dict[str, float]:
        plan = format_rules(env.answer, query) if env.answer else None
        evaluation = evaluate_plan(query, plan, self.index) if plan is not None else None
        kind = self.params.reward.lower()
        outcome = outcome_reward(kind, evaluation, step=step, total_steps=self.params.steps, switch_at=self.params.switch_at)
        kinds = [c.kind for c in env.calls]
        process = process_reward(kinds, self.params.process)
        ok = evaluation is not None and evaluation.delivered
        return {
            "reward": outcome + self.params.process.weight * process,
            "outcome": outcome,
            "process": process,
            "success": float(bool(evaluation and evaluation.final_pass)),
            "delivered": float(ok),
            "commonsense_micro": evaluation.commonsense_micro if ok else 0.0,
            "hard_micro": evaluation.hard_micro if ok else 0.0,
            "turns": float(env.turns),
            **call_breakdown(kinds),
        }
