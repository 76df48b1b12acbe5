"""The official TravelPlanner rates over a set of evaluated plans.

Delivery, commonsense and hard micro/macro rates and the final pass rate:
overall, by level and by number of days.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from star.travel.evaluation.commonsense import COMMONSENSE
from star.travel.evaluation.hard import HARD, hard_set
from star.travel.specs import LEVELS
from star.travel.world.query import Query

if TYPE_CHECKING:  # for types only: evaluate imports this module
    from star.travel.evaluation.evaluate import PlanEvaluation

METRICS = ("delivery_rate", "commonsense_micro", "commonsense_macro", "hard_micro", "hard_macro", "final_pass_rate")


def _rates(pairs: list[tuple[Query, PlanEvaluation]]) -> dict[str, Any]:
    n = len(pairs)
    cs_checks = len(COMMONSENSE) * n
    hard_checks = sum(len(hard_set(q)) for q, _ in pairs)
    cs_passes = sum(e.commonsense_passed for _, e in pairs)
    hard_passes = sum(sum(e.hard.get(k) is True for k in hard_set(q)) for q, e in pairs)

    def rate(num: int, den: int) -> float:
        return num / den if den else 0.0

    def share(num: int, den: int) -> float | None:
        return num / den if den else None  # None: no plan here is checked for it

    return {
        "n": n,
        "delivery_rate": rate(sum(e.delivered for _, e in pairs), n),
        "commonsense_micro": rate(cs_passes, cs_checks),
        "commonsense_macro": rate(sum(e.commonsense_pass for _, e in pairs), n),
        "hard_micro": rate(hard_passes, hard_checks),
        "hard_macro": rate(sum(e.hard_pass for _, e in pairs), n),
        "final_pass_rate": rate(sum(e.final_pass for _, e in pairs), n),
        "commonsense_checks": cs_checks,
        "hard_checks": hard_checks,
        # pass rate of each constraint over the plans it applies to
        "constraints": {k: share(sum(e.commonsense.get(k) is True for _, e in pairs), n) for k in COMMONSENSE}
        | {
            k: share(
                sum(e.hard.get(k) is True for q, e in pairs if k in hard_set(q)),
                sum(k in hard_set(q) for q, _ in pairs),
            )
            for k in HARD
        },
    }


def aggregate(queries: Sequence[Query], evaluations: Sequence[PlanEvaluation]) -> dict[str, Any]:
    """Official rates overall, by level and by number of days.

    commonsense_micro = passes / (8 N); hard_micro = passes / (N + local
    constraints set); the macro rates and final_pass_rate count plans / N.
    """
    if len(queries) != len(evaluations):
        raise ValueError(f"{len(queries)} queries but {len(evaluations)} evaluations")
    pairs = list(zip(queries, evaluations))
    levels = sorted({q.level for q in queries}, key=lambda lv: (LEVELS.index(lv) if lv in LEVELS else len(LEVELS), lv))
    out = _rates(pairs)
    out["by_level"] = {lv: _rates([p for p in pairs if p[0].level == lv]) for lv in levels}
    out["by_days"] = {str(n): _rates([p for p in pairs if p[0].days == n]) for n in sorted({q.days for q in queries})}
    return out
