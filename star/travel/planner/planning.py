"""Turning what a planner knows into a plan: transport modes, stays, meals, sights.

Shared by the expert (which knows what its tool calls showed) and the solver
(which knows the whole sandbox). Plan shape, for k cities over 2k+1 days: a
travel day into each city (one attraction, dinner, a night), a full day there
(three meals, one attraction, a night), and a final travel day home. Choices
start from the cheapest plan that meets every constraint, then some slots are
upgraded at random among the `top_k` cheapest options while the budget allows.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from star.travel.evaluation.hard import HOUSE_RULE_TEXT, ROOM_TYPE_OK
from star.travel.plans.format import render_itinerary
from star.travel.plans.plan import Day, Plan
from star.travel.world.query import Query

NIGHTS = 2  # per city
MODES = ("flight", "self-driving", "taxi")


@dataclass(frozen=True)
class Option:
    name: str
    cost: int  # per unit (seat, meal, night of one room, car)
    extra: tuple = ()


@dataclass
class Answer:
    thought: str
    plan: Plan
    text: str
    cost: int
    reference_cost: int
    ok: bool  # the planner believes the plan meets every constraint
    reason: str = ""


@dataclass
class Knowledge:
    cities: list[str] = field(default_factory=list)
    legs: list[tuple[str, Option | None]] = field(default_factory=list)  # (mode, option)
    hotels: dict[str, list[Option]] = field(default_factory=dict)
    restaurants: dict[str, list[Option]] = field(default_factory=dict)
    attractions: dict[str, list[str]] = field(default_factory=dict)


def give_up(query: Query, reason: str) -> Answer:
    plan = Plan(idx=query.idx, query=query.query, error=reason)
    return Answer("I cannot find a valid plan.", plan, "", 0, 0, False, reason)


def leg_cost(mode: str, opt: Option, people: int) -> int:
    per = {"flight": people, "self-driving": math.ceil(people / 5), "taxi": math.ceil(people / 4)}[mode]
    return opt.cost * per


def wanted_cuisines(query: Query) -> list[str]:
    wanted = query.local_constraint.get("cuisine") or []
    return [wanted] if isinstance(wanted, str) else list(wanted)


def hotel_fits(query: Query, hotel: Option) -> bool:
    """Room type, house rule and minimum stay; extra = (room type, min nights, max people, rules)."""
    rule = HOUSE_RULE_TEXT.get(query.local_constraint.get("house rule") or "")
    room_ok = ROOM_TYPE_OK.get(query.local_constraint.get("room type") or "", lambda t: True)
    room, nights, people, rules = hotel.extra
    return room_ok(room) and nights <= NIGHTS and people > 0 and (rule is None or rule not in rules)


def allowed_modes(query: Query) -> set[str]:
    rule = query.local_constraint.get("transportation")
    return set(MODES) - {"no flight": {"flight"}, "no self-driving": {"self-driving"}}.get(rule, set())


def choose_transport(query: Query, options: list[dict[str, Option]]) -> list[tuple[str, Option]] | None:
    """The cheapest modes per leg that the query allows and that never conflict.

    Self-driving cannot be mixed with flights or taxis (the official
    non-conflicting-transportation rule), so a trip either drives every leg
    or takes a flight or a taxi on each. Ties go to flights and taxis.
    """
    people, allowed = query.people_number, allowed_modes(query)
    plans = []
    mixed = [[(m, legs[m]) for m in ("flight", "taxi") if m in allowed and m in legs] for legs in options]
    if all(mixed):
        plans.append([min(c, key=lambda mo: leg_cost(*mo, people)) for c in mixed])
    if "self-driving" in allowed and all("self-driving" in legs for legs in options):
        plans.append([("self-driving", legs["self-driving"]) for legs in options])
    if not plans:
        return None
    return min(plans, key=lambda p: sum(leg_cost(m, o, people) for m, o in p))


class Planner:
    def __init__(self, top_k: int = 1, upgrade_prob: float = 0.0):
        self.top_k = max(1, top_k)
        self.upgrade_prob = upgrade_prob

    def plan(self, query: Query, know: Knowledge, rng: random.Random) -> Answer:
        people = query.people_number
        if any(opt is None for _, opt in know.legs):
            return give_up(query, "no way to travel one of the legs")
        modes = {m for m, _ in know.legs}
        if "self-driving" in modes and modes & {"flight", "taxi"}:
            return give_up(query, "conflicting transport")

        stays: dict[str, list[tuple[int, Option]]] = {}
        for city in know.cities:
            fits = [(h.cost * math.ceil(people / h.extra[2]) * NIGHTS, h) for h in know.hotels.get(city, []) if hotel_fits(query, h)]
            if not fits:
                return give_up(query, f"no suitable stay in {city}")
            stays[city] = sorted(fits, key=lambda x: (x[0], x[1].name))
            if not know.attractions.get(city):
                return give_up(query, f"no attraction in {city}")

        # Four meals per city: dinner on arrival, then breakfast, lunch, dinner.
        # A name is one restaurant: the evaluator tells meals apart by their text.
        meals: dict[str, list[Option]] = {}
        wanted = wanted_cuisines(query)
        for city in know.cities:
            if len({r.name for r in know.restaurants.get(city, [])}) < 4:
                return give_up(query, f"too few restaurants in {city}")
            meals[city] = []

        def free(city: str, r: Option) -> bool:
            return len(meals[city]) < 4 and all(m.name != r.name for m in meals[city])

        for cuisine in wanted:
            if any(cuisine in r.extra for rs in meals.values() for r in rs):
                continue
            options = [(r.cost, r.name, city, r) for city in know.cities for r in know.restaurants[city] if cuisine in r.extra and free(city, r)]
            if not options:
                return give_up(query, f"no {cuisine} restaurant")
            _, _, city, r = min(options, key=lambda x: x[:3])
            meals[city].append(r)
        for city in know.cities:
            for r in sorted(know.restaurants[city], key=lambda r: (r.cost, r.name)):
                if free(city, r):
                    meals[city].append(r)

        hotel = {city: stays[city][0] for city in know.cities}
        legs = list(know.legs)
        cost = self._cost(legs, hotel, meals, people)
        # Reference: a typical plan, the middle option everywhere.
        reference = sum(leg_cost(m, o, people) for m, o in legs) + sum(stays[c][len(stays[c]) // 2][0] for c in know.cities)
        reference += sum(sorted(r.cost for r in know.restaurants[c])[len(know.restaurants[c]) // 2] * people * 4 for c in know.cities)

        budget = query.budget if query.budget > 0 else None
        if budget is not None and cost > budget:
            return self._finish(query, know, legs, hotel, meals, cost, reference, False, "over budget")
        # Upgrades: vary the plan among good options while the budget allows.
        slack = (budget - cost) if budget is not None else 0
        for city in know.cities:
            if rng.random() < self.upgrade_prob:
                c, h = rng.choice(stays[city][: self.top_k])
                if c - hotel[city][0] <= slack:
                    slack -= c - hotel[city][0]
                    hotel[city] = (c, h)
            spare = [r for r in sorted(know.restaurants[city], key=lambda r: (r.cost, r.name)) if all(m.name != r.name for m in meals[city])]
            for i, r in enumerate(meals[city]):
                if not spare or any(w in r.extra for w in wanted) or rng.random() >= self.upgrade_prob:
                    continue
                new = rng.choice(spare[: self.top_k])
                if (new.cost - r.cost) * people <= slack:
                    slack -= (new.cost - r.cost) * people
                    spare.remove(new)
                    spare.append(r)
                    meals[city][i] = new
            if self.upgrade_prob > 0:
                rng.shuffle(meals[city])
        cost = self._cost(legs, hotel, meals, people)
        return self._finish(query, know, legs, hotel, meals, cost, reference, True, "")

    @staticmethod
    def _cost(legs, hotel, meals, people: int) -> int:
        return sum(leg_cost(m, o, people) for m, o in legs) + sum(c for c, _ in hotel.values()) + sum(r.cost * people for rs in meals.values() for r in rs)

    @staticmethod
    def _finish(query, know, legs, hotel, meals, cost, reference, ok, reason) -> Answer:
        route = [query.org, *know.cities, query.org]
        days: list[Day] = []
        for j, city in enumerate(know.cities):
            mode, opt = legs[j]
            a, b = route[j], route[j + 1]
            sights = know.attractions.get(city, [])
            stay = f"{hotel[city][1].name}, {city}"
            m = [f"{r.name}, {city}" for r in meals[city]]
            days.append(Day(2 * j + 1, f"from {a} to {b}", _transport(mode, opt, a, b), "-", f"{sights[0]}, {city};" if len(sights) > 1 else "-", "-", m[0], stay))
            days.append(Day(2 * j + 2, city, "-", m[1], f"{sights[-1]}, {city};" if sights else "-", m[2], m[3], stay))
        mode, opt = legs[-1]
        days.append(Day(len(days) + 1, f"from {route[-2]} to {route[-1]}", _transport(mode, opt, route[-2], route[-1])))
        plan = Plan(idx=query.idx, query=query.query, days=days)
        return Answer("Plan ready.", plan, render_itinerary(plan, skip_empty=True), cost, reference, ok, reason)


def _transport(mode: str, opt: Option, a: str, b: str) -> str:
    if mode == "flight":
        return f"Flight Number: {opt.name}, from {a} to {b}"
    return f"{'Self-driving' if mode == 'self-driving' else 'Taxi'}, from {a} to {b}"
