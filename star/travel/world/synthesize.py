"""Atomic-element query synthesis with a real feasibility check.

A query is composed from atomic elements (origin, destination city or state,
dates, days and cities, people, local constraints), then planned: by the
expert through the tools (`keep: expert`, so every kept query is solvable by
an agent that sees only the tools' observations) or by the solver over the
whole sandbox (`keep: feasible`, so the kept queries are what is feasible,
and the stats count how many of them the expert solves too). A query is kept
only if that plan passes the evaluator with the budget set. The budget is the
level's share of a typical plan's cost, never below the plan's own cost.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import date, timedelta
from typing import Any

from star.train.filtering import quotas
from star.travel.evaluation.evaluate import evaluate_plan
from star.travel.planner.expert import Expert, run_on_tools
from star.travel.planner.planning import Answer
from star.travel.planner.solver import Solver
from star.travel.specs import SynthesisSpec
from star.travel.world.query import Query
from star.travel.world.sandbox import CUISINES, Sandbox
from star.travel.world.sandbox_index import index_for
from star.travel.world.tools import TravelTools

HOUSE_RULES = ("parties", "smoking", "children under 10", "pets", "visitors")
ROOM_TYPES = ("entire room", "private room", "shared room", "not shared room")
TRANSPORT = ("no flight", "no self-driving")
SPLITS = ("train", "validation", "test")
CITIES_FOR_DAYS = {3: 1, 5: 2, 7: 3}


class Synthesizer:
    def __init__(self, sandbox: Sandbox, spec: SynthesisSpec, row_cap: int = 5, max_calls: int | None = None):
        """`max_calls`: the expert's tool calls per query (the environment's turns less the answer); None = its own cap."""
        self.spec = spec
        self.tools = {t.name: t for t in TravelTools(sandbox, row_cap=row_cap).as_tools()}
        self.index = index_for(sandbox)
        self.expert = Expert(mistake_rate=0.0, top_k=1, upgrade_prob=0.0)
        self.max_calls = max_calls
        self.solver = Solver(sandbox) if spec.keep == "feasible" else None
        ix = TravelTools(sandbox, row_cap=row_cap)
        drivable = {k for k, r in ix.distances.items() if r["distance_km"] and r["duration"] and "day" not in r["duration"]}
        legs = ix.routes | drivable
        # Round trips that exist: flights both ways, or a drive both ways.
        self.partners: dict[str, list[str]] = {}
        for a, b in sorted(legs):
            if (b, a) in legs and a != b:
                self.partners.setdefault(a, []).append(b)
        self.flight_dates: dict[tuple[str, str], list[str]] = {}
        for o, d, day in sorted(ix.flights):
            self.flight_dates.setdefault((o, d), []).append(day)
        self.state_of = dict(zip(sandbox.cities["city"], sandbox.cities["state"]))
        self.states = {s: sorted(c for c, st in self.state_of.items() if st == s) for s in set(self.state_of.values())}
        first, last = ix.first_date, ix.last_date
        self.first = date.fromisoformat(first)
        self.span = (date.fromisoformat(last) - self.first).days
        self.origins = sorted(self.partners)
        self.stats: Counter = Counter()

    # -- composing -----------------------------------------------------------

    def compose(self, rng: random.Random, level: str, idx: int) -> Query | None:
        spec = self.spec
        days = rng.choices(list(spec.days), weights=list(spec.days.values()))[0]
        k = CITIES_FOR_DAYS[days]
        if days - 1 > self.span or not self.origins:
            return None
        org = rng.choice(self.origins)
        if k == 1:
            dest = rng.choice(self.partners[org])
        else:
            # States with a city this origin has a round trip to, so the trip can start.
            near = {self.state_of.get(c) for c in self.partners[org]}
            states = [s for s, cs in self.states.items() if s in near and s != self.state_of.get(org) and len(cs) >= k]
            if not states:
                return None
            dest = rng.choice(sorted(states))
        start = self.first + timedelta(days=rng.randint(0, self.span - days + 1))
        # Prefer a day with an outbound flight: sparse tables rarely have one by chance.
        flown = [d for d in self.flight_dates.get((org, dest), []) if date.fromisoformat(d) <= self.first + timedelta(days=self.span - days + 1)]
        if flown and rng.random() < 0.7:
            start = date.fromisoformat(rng.choice(flown))
        dates = [(start + timedelta(days=i)).isoformat() for i in range(days)]
        people = 1 if level == "easy" else rng.randint(*spec.people)
        local = {"house rule": None, "cuisine": None, "room type": None, "transportation": None}
        if level != "easy":
            kinds = ["house rule", "cuisine", "room type"]
            chosen = [rng.choice(kinds)] if level == "medium" else ["transportation", *rng.sample(kinds, 2)]
            for kind in chosen:
                if kind == "house rule":
                    local[kind] = rng.choice(HOUSE_RULES)
                elif kind == "cuisine":
                    local[kind] = sorted(rng.sample(CUISINES, rng.randint(1, 3)))
                elif kind == "room type":
                    local[kind] = rng.choice(ROOM_TYPES)
                else:
                    local[kind] = rng.choice(TRANSPORT)
        return Query(idx=idx, org=org, dest=dest, days=days, visiting_city_number=k, date=dates, people_number=people, local_constraint=local, budget=0, level=level)

    def expert_answer(self, query: Query) -> Answer:
        return run_on_tools(self.expert.script(query, random.Random(0), self.max_calls), self.tools)[0]

    def solve(self, query: Query) -> Query | None:
        """Set the budget from the expert's or the solver's plan; None if it found no feasible plan."""
        answer = self.solver.solve(query) if self.solver is not None else self.expert_answer(query)
        if not answer.ok:
            self.stats[f"dropped_{answer.reason.split(' in ')[0]}"] += 1
            return None
        factor = self.spec.budget_factor[query.level]
        step = self.spec.budget_round
        budget = max(answer.cost, math.ceil(factor * answer.reference_cost / step) * step)
        query = query.model_copy(update={"budget": int(budget)})
        if not evaluate_plan(query, answer.plan, self.index).final_pass:
            self.stats["dropped_evaluator"] += 1
            return None
        if self.solver is not None:
            solved = evaluate_plan(query, self.expert_answer(query).plan, self.index).final_pass
            self.stats[f"expert_{'solved' if solved else 'unsolved'}"] += 1
            self.stats[f"expert_{'solved' if solved else 'unsolved'}_{query.days}d_{query.level}"] += 1
        return query

    def run(self) -> dict[str, list[Query]]:
        rng = random.Random(self.spec.seed)
        seen: set[str] = set()
        out: dict[str, list[Query]] = {}
        idx = 0
        for split in SPLITS:
            out[split] = []
            for level, count in quotas(self.spec.sizes.get(split, 0), self.spec.levels).items():
                for _ in range(count):
                    for _attempt in range(self.spec.max_attempts):
                        self.stats["attempts"] += 1
                        query = self.compose(rng, level, idx + 1)
                        if query is None:
                            self.stats["dropped_no_candidate"] += 1
                            continue
                        key = query.model_dump_json(include={"org", "dest", "date", "people_number", "local_constraint"})
                        if key in seen:
                            self.stats["dropped_duplicate"] += 1
                            continue
                        solved = self.solve(query)
                        if solved is None:
                            continue
                        seen.add(key)
                        idx += 1
                        out[split].append(solved.model_copy(update={"query": render_query(solved, rng)}))
                        break
                    else:
                        self.stats[f"unfilled_{split}_{level}"] += 1
        self.stats["kept"] = idx
        return out


# ---------------------------------------------------------------- rendering

_TEMPLATES = (
    "Plan a {days}-day trip for {people} from {org} to {where}, from {start} to {end}, with a budget of ${budget}.{extra}",
    "I want to go from {org} to {where} for {days} days, {start} to {end}. We are {people}. Budget: ${budget}.{extra}",
    "Help me plan a trip from {org} to {where} from {start} to {end} for {people}; budget ${budget}.{extra}",
    "{people_cap} traveling from {org} to {where}, {start} to {end} ({days} days), budget ${budget}.{extra}",
)
_HOUSE = {
    "parties": "We want to have a party.",
    "smoking": "Some of us smoke.",
    "children under 10": "We travel with children under 10.",
    "pets": "We bring our pet.",
    "visitors": "We will have visitors.",
}
_ROOM = {
    "entire room": "We want an entire room.",
    "private room": "We want a private room.",
    "shared room": "A shared room is fine.",
    "not shared room": "No shared rooms.",
}
_TRANSPORT = {"no flight": "No flights, please.", "no self-driving": "We will not drive."}


def render_query(q: Query, rng: random.Random) -> str:
    people = "1 person" if q.people_number == 1 else f"{q.people_number} people"
    where = q.dest if q.visiting_city_number == 1 else f"{q.visiting_city_number} cities in {q.dest}"
    extra = []
    local = q.local_constraint
    if local.get("house rule"):
        extra.append(_HOUSE[local["house rule"]])
    if local.get("room type"):
        extra.append(_ROOM[local["room type"]])
    if local.get("cuisine"):
        extra.append("We want " + " and ".join(local["cuisine"]) + " food.")
    if local.get("transportation"):
        extra.append(_TRANSPORT[local["transportation"]])
    template = rng.choice(_TEMPLATES)
    return template.format(
        days=q.days,
        people=people,
        people_cap=people[0].upper() + people[1:],
        org=q.org,
        where=where,
        start=q.date[0],
        end=q.date[-1],
        budget=q.budget,
        extra="".join(" " + e for e in extra),
    )


def compose_queries(sandbox: Sandbox, synthesize: Any, env: Any) -> tuple[dict[str, list[Query]], dict]:
    """The splits of the synthesize stage (`synthesize`: star.config.SynthesizeParams) and their stats.

    With `source: official` the test split is the published query file; train and
    validation are still composed, so training works as before.
    """
    from star.travel.world.official import check_world, read_official_queries
    from star.travel.world.paraphrase import paraphrase

    spec = SynthesisSpec.model_validate(synthesize.model_dump(exclude={"paraphrase"}))
    official = None
    if spec.source == "official":
        # Read first: a bad file stops the stage before any synthesis.
        official = read_official_queries(spec.path)
        check_world(official, dict(zip(sandbox.cities["city"], sandbox.cities["state"])), spec.path)
        spec = spec.model_copy(update={"sizes": {**spec.sizes, "test": 0}})
    synthesizer = Synthesizer(sandbox, spec, row_cap=env.row_cap, max_calls=env.max_turns - 1)
    splits, stats = synthesizer.run(), dict(synthesizer.stats)
    if synthesize.paraphrase.enabled:
        for split, queries in splits.items():
            splits[split], counts = paraphrase(queries, synthesize.paraphrase)
            stats.update({f"paraphrase_{k}": stats.get(f"paraphrase_{k}", 0) + v for k, v in counts.items()})
    if official is not None:  # the published wording is kept: never paraphrased
        splits["test"] = official
        stats["official_test"] = len(official)
    return splits, stats
