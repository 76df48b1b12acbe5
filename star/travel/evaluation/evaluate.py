"""The TravelPlanner evaluator: 8 commonsense and 5 hard constraints per plan.

Two modes. `official` (the default) reproduces the verdicts of the public
TravelPlanner evaluation scripts, quirks included, so numbers are comparable
with published results. `strict` applies the rules those scripts intend.

Commonsense (8): within_sandbox, complete_information, within_current_city,
reasonable_city_route, diverse_restaurants, diverse_attractions,
non_conflicting_transportation, minimum_nights_stay.
Hard (5): budget, room_rule, cuisine, room_type, transportation. A local
constraint the query does not set counts as a pass, and is left out of the
micro rate (as officially). Budget uses the official multipliers: flight x
people, self-driving x ceil(people/5), taxi x ceil(people/4), meal x people,
room x ceil(people/max occupancy) for each day it is listed. Self-driving
costs int(km * 0.05), a taxi int(km); a distance whose duration mentions
"day" has no cost, so such a leg does not exist.

How `official` reads a plan, and what `strict` does instead
-----------------------------------------------------------
* Attractions: officially the text is split on ";" and the last piece is
  dropped, so an attraction without a trailing ";" is never checked (for
  sandbox, city or repeats). Strict checks every non-empty piece.
* Within current city: officially only travel days are checked; on any other
  day the check runs over the letters of the city name, so an item from
  another city passes. Officially a travel day's item only has to contain
  one of the two city names somewhere in its text. Strict compares the
  item's own city ("Name, City") with the day's cities on every day; the
  hotel must be in the day's last city.
* Within sandbox, flights: officially a flight matches on number, origin and
  destination but not on date. Strict also needs the date of that day
  (query.date[i]); a leg of any other kind (e.g. "Bus") fails strict.
* Name look-ups: officially a restaurant, attraction or hotel matches when its
  database name *contains* the written name, in the written city, and the
  first such row in table order gives its cost, cuisines, rules and room
  type (`res['Average Cost'].values[0]`, `res['price'].values[0]` in
  `get_total_cost`, evaluation/hard_constraint.py). Strict needs the exact
  name (surrounding spaces ignored; a name may hold a newline) and, when a
  name appears several times in a city, also reads the first of those rows,
  as the official code does: never the cheapest, which a planner that sorts
  by price (the scripted expert) would pick.
* Official rows are the rows the official tools load: they drop every row
  with a missing value (in the public database, 762 hotels, most without
  house rules). Strict sees every row.
* Minimum nights: officially checked only when exactly one hotel row matches
  the written name. Strict checks the matched row.
* City names: officially "City(State)" is cut at the parenthesis, but
  "City (State)" or "City " keep a trailing space and so become a different
  (unknown) city. Strict trims spaces after cutting.
* Route: officially day 1 may stay in the origin without a "from ... to ..."
  and a 3-day trip may go to any city. Strict needs day 1 to leave the
  origin and every city between the ends to be the destination (a one-city
  trip), or in it (a state, when the query visits two cities or more). The
  query's visiting_city_number decides, not the name: Washington is both a
  city and a state.
* Transport modes: strict reads each leg once (flight, else self-driving,
  else taxi) for the conflict check and the "no flight"/"no self-driving"
  constraint; officially the conflict check prefers taxi, then
  self-driving, then flight, and the constraint looks for "Flight" or
  "Self-driving" with that exact capitalisation.
* Cuisine: officially a meal in the origin city ends that day's meals, so a
  breakfast at home skips lunch and dinner; a cuisine counts when its name
  occurs in the restaurant's cuisine text. Strict ignores only the meals in
  the origin and matches whole cuisine names.
* Repeats: officially two restaurants (or attractions) are the same when their
  texts are equal. Strict compares the parsed (name, city).
* Gate: officially hard constraints are not evaluated (None, never a pass)
  unless complete_information and within_sandbox pass. Strict always
  evaluates them; an item missing from the sandbox then adds no cost and
  breaks no local constraint (within_sandbox already fails).

Where the official scripts would crash on a plan (an unreadable "from A to B"
on a flight, a flight text without "Flight Number: ", an empty city with a
hotel), that check fails here instead; nothing here raises on plan content.
The only other known difference comes from reading submissions with
`star.travel.plans.plan`: a day missing a key is read as "-" (the official script
fails completeness), extra keys are dropped (officially each filled one
counts towards the 50% of filled fields), and a day without a "days" number
gets its position.

A null field (JSON `null`, Python None) is not "-". Officially every check
first tests `unit[key] and unit[key] != '-'`, which skips a null like "-",
but completeness tests `unit[key] in ['', '-']`, which a null passes: a null
meal, attraction, transport or hotel is never missing, and it does not count
as filled either (evaluation/commonsense_constraint.py, `is_not_absent`). A
null hotel makes `is_valid_accommodaton` call `get_valid_name_city(None)` and
a null current city makes `'from' in None` raise, so here those checks fail
(minimum_nights_stay; reasonable_city_route, within_current_city and
complete_information). Strict reads a null as "-".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from star.io import write_jsonl
from star.travel.evaluation.commonsense import COMMONSENSE, COMMONSENSE_CHECKS
from star.travel.evaluation.hard import HARD, LOCAL_CHECKS, LOCAL_TO_HARD, hard_set, local_constraint, total_cost
from star.travel.evaluation.metrics import METRICS, aggregate
from star.travel.plans.plan import Plan, read_submission
from star.travel.plans.plan_read import PlanContext, read_day
from star.travel.world.query import Query, read_queries
from star.travel.world.sandbox import Sandbox, load_travelplanner
from star.travel.world.sandbox_index import SandboxIndex, index_for

MODES = ("official", "strict")
LABELS = {
    "within_sandbox": "Within Sandbox",
    "complete_information": "Complete Information",
    "within_current_city": "Within Current City",
    "reasonable_city_route": "Reasonable City Route",
    "diverse_restaurants": "Diverse Restaurants",
    "diverse_attractions": "Diverse Attractions",
    "non_conflicting_transportation": "Non-conf. Transportation",
    "minimum_nights_stay": "Minimum Nights Stay",
    "budget": "Budget",
    "room_rule": "Room Rule",
    "cuisine": "Cuisine",
    "room_type": "Room Type",
    "transportation": "Transportation",
}


# ------------------------------------------------------------------ results
@dataclass
class PlanEvaluation:
    """Verdicts for one plan. None = not evaluated, which never counts as a pass."""

    idx: int
    mode: str
    delivered: bool
    commonsense: dict[str, bool | None]
    hard: dict[str, bool | None]
    hard_set: tuple[str, ...] = ("budget",)
    cost: int | None = None
    error: str | None = None
    failed: list[str] = field(default_factory=list)

    @property
    def commonsense_pass(self) -> bool:
        return all(self.commonsense.get(k) is True for k in COMMONSENSE)

    @property
    def hard_pass(self) -> bool:
        return all(self.hard.get(k) is True for k in HARD)

    @property
    def final_pass(self) -> bool:
        return self.commonsense_pass and self.hard_pass

    @property
    def commonsense_passed(self) -> int:
        return sum(self.commonsense.get(k) is True for k in COMMONSENSE)

    @property
    def hard_passed(self) -> int:
        """Passes among the constraints the query sets (the micro numerator)."""
        return sum(self.hard.get(k) is True for k in self.hard_set)

    @property
    def commonsense_micro(self) -> float:
        return self.commonsense_passed / len(COMMONSENSE)

    @property
    def hard_micro(self) -> float:
        return self.hard_passed / len(self.hard_set) if self.hard_set else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "idx": self.idx,
            "mode": self.mode,
            "delivered": self.delivered,
            "commonsense": dict(self.commonsense),
            "hard": dict(self.hard),
            "hard_set": list(self.hard_set),
            "cost": self.cost,
            "commonsense_pass": self.commonsense_pass,
            "hard_pass": self.hard_pass,
            "final_pass": self.final_pass,
            "failed": list(self.failed),
            "error": self.error,
        }


def _verdict(check: Callable[..., bool], *args: Any) -> bool:
    try:
        return bool(check(*args))
    except Exception:  # an unreadable plan fails the check, never the run
        return False


def evaluate_plan(
    query: Query, plan: Plan, sandbox_or_index: Sandbox | SandboxIndex, mode: str = "official"
) -> PlanEvaluation:
    """Score one plan against its query. Never raises on plan content."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    ix = index_for(sandbox_or_index)
    idx = getattr(plan, "idx", query.idx)
    idx = idx if isinstance(idx, int) else query.idx
    sets = hard_set(query)
    undelivered = PlanEvaluation(
        idx=idx,
        mode=mode,
        delivered=False,
        commonsense=dict.fromkeys(COMMONSENSE),
        hard=dict.fromkeys(HARD),
        hard_set=sets,
        error=getattr(plan, "error", None) or "no plan",
        failed=list(COMMONSENSE) + list(sets),
    )
    try:
        if not plan.delivered or not isinstance(plan.days, list):
            return undelivered
        days = [read_day(d, mode == "strict") for d in plan.days[: query.days]]
    except Exception:
        return undelivered
    if not days:
        return undelivered

    c = PlanContext(query, days, ix, mode == "strict")
    commonsense: dict[str, bool | None] = {k: _verdict(f, c) for k, f in COMMONSENSE_CHECKS.items()}
    try:
        cost: int | None = total_cost(c)
    except Exception:
        cost = None
    hard: dict[str, bool | None] = dict.fromkeys(HARD)
    if c.strict or (commonsense["complete_information"] and commonsense["within_sandbox"]):
        hard["budget"] = cost is not None and cost <= query.budget
        for key, check in LOCAL_CHECKS.items():
            value = local_constraint(query, key)
            hard[LOCAL_TO_HARD[key]] = True if value is None else _verdict(check, c, value)
    failed = [k for k in COMMONSENSE if commonsense[k] is not True] + [k for k in HARD if hard[k] is not True]
    return PlanEvaluation(
        idx=idx, mode=mode, delivered=True, commonsense=commonsense, hard=hard, hard_set=sets, cost=cost, failed=failed
    )


def _match_plans(queries: Sequence[Query], plans: Sequence[Plan]) -> list[Plan]:
    """Pair plans with queries by idx when query idxs are unique, else by position."""
    if len({q.idx for q in queries}) == len(queries):
        by_idx: dict[int, Plan] = {}
        for p in plans:
            by_idx.setdefault(p.idx, p)
        return [by_idx.get(q.idx) or Plan(idx=q.idx, error="no plan submitted") for q in queries]
    return [plans[i] if i < len(plans) else Plan(idx=q.idx, error="no plan submitted") for i, q in enumerate(queries)]


def evaluate_plans(
    queries: Sequence[Query], plans: Sequence[Plan], sandbox: Sandbox | SandboxIndex, mode: str = "official"
) -> list[PlanEvaluation]:
    """One evaluation per query, in query order; a missing plan is undelivered."""
    ix = index_for(sandbox)
    return [evaluate_plan(q, p, ix, mode) for q, p in zip(queries, _match_plans(queries, plans))]


# ---------------------------------------------------------------------- CLI
def load_sandbox(database: str | Path) -> Sandbox:
    """The official CSV layout, or a parquet directory written by Sandbox.save."""
    db = Path(database)
    if (db / "flights" / "clean_Flights_2022.csv").exists():
        return load_travelplanner(db)
    return Sandbox.load(db)


def _print_table(metrics: dict[str, Any], mode: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"TravelPlanner evaluation ({mode})")
    table.add_column("subset")
    table.add_column("n", justify="right")
    for m in METRICS:
        table.add_column(m.replace("_", " "), justify="right")
    rows = [("overall", metrics)] + [(f"level {k}", v) for k, v in metrics["by_level"].items()]
    rows += [(f"{k} days", v) for k, v in metrics["by_days"].items()]
    for name, r in rows:
        table.add_row(name, str(r["n"]), *(f"{100 * r[m]:.1f}%" for m in METRICS))
    per = Table(title="per constraint (pass rate over the plans it applies to)")
    per.add_column("constraint")
    per.add_column("pass", justify="right")
    for k, v in metrics["constraints"].items():
        per.add_row(LABELS[k], "-" if v is None else f"{100 * v:.1f}%")
    console = Console(width=160)
    console.print(table)
    console.print(per)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m star.travel.evaluation.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True, help="official CSV layout, or a parquet dir from Sandbox.save")
    parser.add_argument("--queries", required=True, help="queries JSONL (official format)")
    parser.add_argument("--plans", required=True, help="submission JSONL: {idx, query, plan}")
    parser.add_argument("--out", help="write per-plan results here (JSONL)")
    parser.add_argument("--mode", choices=MODES, default="official")
    args = parser.parse_args(argv)

    queries = read_queries(args.queries)
    plans = read_submission(args.plans)
    evaluations = evaluate_plans(queries, plans, load_sandbox(args.database), args.mode)
    metrics = aggregate(queries, evaluations)
    metrics["mode"] = args.mode
    if args.out:
        write_jsonl(args.out, (e.to_dict() for e in evaluations))
    _print_table(metrics, args.mode)
    print(json.dumps(metrics, sort_keys=True))
    sys.stdout.flush()
    return metrics


if __name__ == "__main__":
    main()
