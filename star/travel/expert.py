"""The scripted expert: a planner that acts only through the tools.

It sees exactly what an agent sees (the tools' text observations), so its
trajectories are valid training data and its success shows a query is
solvable from the agent's point of view. `script` is a generator: it yields
tool calls, receives observation strings, and returns the final answer, so
the same decisions drive a text episode in TravelEnv (distillation) and a
direct run on the tools (feasibility checks during synthesis).

Plan shape, for k cities over 2k+1 days: a travel day into each city (one
attraction, dinner, a night), a full day there (three meals, one attraction,
a night), and a final travel day home. Choices start from the cheapest plan
that meets every constraint, then some slots are upgraded at random among
the `top_k` cheapest options while the budget allows.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Generator
from dataclasses import dataclass, field

from star.travel.evaluate import HOUSE_RULE_TEXT, ROOM_TYPE_OK
from star.travel.format import render_itinerary
from star.travel.plan import Day, Plan
from star.travel.query import Query

MAX_RETRIES = 3  # per call, when a tool fails transiently


@dataclass(frozen=True)
class Call:
    thought: str
    name: str
    arguments: dict[str, str]


@dataclass
class Answer:
    thought: str
    plan: Plan
    text: str
    cost: int
    reference_cost: int
    ok: bool  # the expert believes the plan meets every constraint
    reason: str = ""


@dataclass(frozen=True)
class Option:
    name: str
    cost: int  # per unit (seat, meal, night of one room)
    extra: tuple = ()


@dataclass
class Knowledge:
    cities: list[str] = field(default_factory=list)
    legs: list[tuple[str, Option | None]] = field(default_factory=list)  # (mode, option)
    hotels: dict[str, list[Option]] = field(default_factory=dict)
    restaurants: dict[str, list[Option]] = field(default_factory=dict)
    attractions: dict[str, list[str]] = field(default_factory=dict)


# ---------------------------------------------------------------- observations

_MONEY = re.compile(r"\$(\d+)")


def _failed(obs: str) -> bool:
    return obs.startswith("Error:") or obs.startswith("No results (")


def _rows(obs: str) -> list[str]:
    return [line for line in obs.splitlines() if line and not line.startswith("(") and not line.startswith("No ")]


def parse_flights(obs: str) -> list[Option]:
    out = []
    for line in _rows(obs):
        parts = line.split(" | ")
        money = _MONEY.fullmatch(parts[-1]) if len(parts) == 3 else None
        if money:
            out.append(Option(parts[0], int(money.group(1))))
    return out


def parse_drive(obs: str) -> Option | None:
    money = _MONEY.search(obs)
    return Option("", int(money.group(1))) if money and not obs.startswith("No ") else None


def parse_hotels(obs: str) -> list[Option]:
    out = []
    for line in _rows(obs):
        parts = line.split(" | ")
        if len(parts) < 6:
            continue
        name = " | ".join(parts[:-5])
        room, price, nights, people, rules = parts[-5:]
        money = _MONEY.fullmatch(price)
        nums = re.findall(r"\d+", nights + " " + people)
        if name == "-" or not money or len(nums) != 2:
            continue  # incomplete rows are not bookable
        rules = rules.removeprefix("rules: ")
        out.append(Option(name, int(money.group(1)), (room, int(nums[0]), int(nums[1]), rules)))
    return out


def parse_restaurants(obs: str) -> list[Option]:
    out = []
    for line in _rows(obs):
        parts = line.rsplit(" | ", 2)
        money = _MONEY.fullmatch(parts[-1]) if len(parts) == 3 else None
        if money:
            cuisines = tuple(c.strip() for c in parts[1].split(","))
            out.append(Option(parts[0], int(money.group(1)), cuisines))
    return out


# ---------------------------------------------------------------- the expert


class Expert:
    def __init__(self, mistake_rate: float = 0.0, top_k: int = 2, upgrade_prob: float = 0.5):
        self.mistake_rate = mistake_rate
        self.top_k = max(1, top_k)
        self.upgrade_prob = upgrade_prob

    def script(self, query: Query, rng: random.Random) -> Generator[Call, str, Answer]:
        know = Knowledge()
        k = query.visiting_city_number
        if query.days != 2 * k + 1:
            return self._give_up(query, f"{query.days} days cannot visit {k} cities")
        constraint = query.local_constraint

        def ask(thought: str, name: str, **arguments: str) -> Generator[Call, str, str]:
            for _ in range(MAX_RETRIES):
                obs = yield Call(thought, name, arguments)
                if not _failed(obs):
                    return obs
                thought = "Retry."
            return obs

        if k > 1:
            obs = yield from ask("Cities in the state.", "SearchCity", state=query.dest)
            listed = [c.strip() for c in obs.split(",")] if not _failed(obs) else []
            # City choice depends on the query alone, so every run visits the same cities.
            random.Random(f"cities-{query.idx}-{query.org}-{query.dest}").shuffle(listed)
            know.cities = [c for c in listed if c != query.org][:k]
            if len(know.cities) < k:
                return self._give_up(query, "not enough cities in the state")
        else:
            know.cities = [query.dest]

        route = [query.org, *know.cities, query.org]
        no_flight = constraint.get("transportation") == "no flight"
        no_drive = constraint.get("transportation") == "no self-driving"
        # Fly where possible; a leg without flights goes by taxi after a flight
        # and by car otherwise, and once driving, keep the car (modes never conflict).
        for j in range(len(route) - 1):
            a, b, day = route[j], route[j + 1], query.date[min(2 * j, len(query.date) - 1)]
            modes = {m for m, _ in know.legs}
            leg: tuple[str, Option | None] = ("none", None)
            if not no_flight and "self-driving" not in modes:
                flights = parse_flights((yield from ask("Flights.", "SearchFlight", departure=a, destination=b, date=day)))
                if flights:
                    leg = ("flight", flights[0])
            if leg[1] is None:
                mode = "taxi" if no_drive or "flight" in modes or "taxi" in modes else "self-driving"
                drive = parse_drive((yield from ask("Drive.", "GoogleDistanceMatrix", departure=a, destination=b, mode=mode)))
                leg = (mode, drive)
            know.legs.append(leg)

        for city in know.cities:
            know.hotels[city] = parse_hotels((yield from ask("Hotels.", "SearchAccommodation", city=city)))
            know.restaurants[city] = parse_restaurants((yield from ask("Food.", "SearchRestaurant", city=city)))
            obs = yield from ask("Sights.", "SearchAttraction", city=city)
            know.attractions[city] = _rows(obs) if not _failed(obs) else []

        return self.finish(self.answer(query, know, rng), rng)

    # -- choosing --------------------------------------------------------------

    def _give_up(self, query: Query, reason: str) -> Answer:
        plan = Plan(idx=query.idx, query=query.query, error=reason)
        return Answer("I cannot find a valid plan.", plan, "", 0, 0, False, reason)

    def answer(self, query: Query, know: Knowledge, rng: random.Random) -> Answer:
        people = query.people_number
        if any(opt is None for _, opt in know.legs):
            return self._give_up(query, "no way to travel one of the legs")
        modes = {m for m, _ in know.legs}
        if "self-driving" in modes and modes & {"flight", "taxi"}:
            return self._give_up(query, "conflicting transport")

        def leg_cost(mode: str, opt: Option) -> int:
            per = {"flight": people, "self-driving": math.ceil(people / 5), "taxi": math.ceil(people / 4)}[mode]
            return opt.cost * per

        rule = HOUSE_RULE_TEXT.get(query.local_constraint.get("house rule") or "")
        room_ok = ROOM_TYPE_OK.get(query.local_constraint.get("room type") or "", lambda t: True)
        stays: dict[str, list[tuple[int, Option]]] = {}
        for city in know.cities:
            fits = [
                (h.cost * math.ceil(people / h.extra[2]) * 2, h)
                for h in know.hotels.get(city, [])
                if room_ok(h.extra[0]) and h.extra[1] <= 2 and h.extra[2] > 0 and (rule is None or rule not in h.extra[3])
            ]
            if not fits:
                return self._give_up(query, f"no suitable stay in {city}")
            stays[city] = sorted(fits, key=lambda x: (x[0], x[1].name))
            if not know.attractions.get(city):
                return self._give_up(query, f"no attraction in {city}")

        # Four meals per city: dinner on arrival, then breakfast, lunch, dinner.
        meals: dict[str, list[Option]] = {}
        wanted = query.local_constraint.get("cuisine") or []
        wanted = [wanted] if isinstance(wanted, str) else list(wanted)
        for city in know.cities:
            if len(know.restaurants.get(city, [])) < 4:
                return self._give_up(query, f"too few restaurants in {city}")
            meals[city] = []
        for cuisine in wanted:
            if any(cuisine in r.extra for rs in meals.values() for r in rs):
                continue
            options = [(r.cost, r.name, city, r) for city in know.cities for r in know.restaurants[city] if cuisine in r.extra and r not in meals[city] and len(meals[city]) < 4]
            if not options:
                return self._give_up(query, f"no {cuisine} restaurant")
            _, _, city, r = min(options, key=lambda x: x[:3])
            meals[city].append(r)
        for city in know.cities:
            for r in sorted(know.restaurants[city], key=lambda r: (r.cost, r.name)):
                if len(meals[city]) < 4 and r not in meals[city]:
                    meals[city].append(r)

        hotel = {city: stays[city][0] for city in know.cities}
        legs = list(know.legs)
        cost = sum(leg_cost(m, o) for m, o in legs) + sum(c for c, _ in hotel.values()) + sum(r.cost * people for rs in meals.values() for r in rs)
        # Reference: a typical plan, the middle option everywhere.
        reference = sum(leg_cost(m, o) for m, o in legs) + sum(stays[c][len(stays[c]) // 2][0] for c in know.cities)
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
            free = [r for r in sorted(know.restaurants[city], key=lambda r: (r.cost, r.name)) if r not in meals[city]]
            for i, r in enumerate(meals[city]):
                if not free or any(w in r.extra for w in wanted) or rng.random() >= self.upgrade_prob:
                    continue
                new = rng.choice(free[: self.top_k])
                if (new.cost - r.cost) * people <= slack:
                    slack -= (new.cost - r.cost) * people
                    free.remove(new)
                    free.append(r)
                    meals[city][i] = new
            if self.upgrade_prob > 0:
                rng.shuffle(meals[city])
        cost = sum(leg_cost(m, o) for m, o in legs) + sum(c for c, _ in hotel.values()) + sum(r.cost * people for rs in meals.values() for r in rs)
        return self._finish(query, know, legs, hotel, meals, cost, reference, True, "")

    def _finish(self, query, know, legs, hotel, meals, cost, reference, ok, reason) -> Answer:
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

    def finish(self, answer: Answer, rng: random.Random) -> Answer:
        """With probability `mistake_rate`, spoil the plan the way weak agents do."""
        if not answer.plan.days or rng.random() >= self.mistake_rate:
            return answer
        days = [Day(**vars(d)) for d in answer.plan.days]
        full = days[1]
        kind = rng.choice(["drop_meal", "repeat_meal", "no_stay", "wrong_city", "drop_transport"])
        if kind == "drop_meal":
            full.lunch = "-"
        elif kind == "repeat_meal":
            full.dinner = days[0].dinner
        elif kind == "no_stay":
            days[0].accommodation = "-"
        elif kind == "wrong_city":
            full.current_city = days[0].current_city.split(" to ")[0].removeprefix("from ")
        else:
            days[-1].transportation = "-"
        plan = Plan(idx=answer.plan.idx, query=answer.plan.query, days=days)
        return Answer(answer.thought, plan, render_itinerary(plan, skip_empty=True), answer.cost, answer.reference_cost, False, f"mistake: {kind}")


def _transport(mode: str, opt: Option, a: str, b: str) -> str:
    if mode == "flight":
        return f"Flight Number: {opt.name}, from {a} to {b}"
    return f"{'Self-driving' if mode == 'self-driving' else 'Taxi'}, from {a} to {b}"


def run_on_tools(script: Generator[Call, str, Answer], tools: dict) -> tuple[Answer, int]:
    """Drive a script directly on Tool objects; returns the answer and the number of calls."""
    calls = 0
    try:
        call = next(script)
        while True:
            calls += 1
            call = script.send(tools[call.name].execute(call.arguments).content)
    except StopIteration as stop:
        return stop.value, calls
