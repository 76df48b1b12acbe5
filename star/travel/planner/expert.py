"""The scripted expert: a planner that acts only through the tools.

It sees exactly what an agent sees (the tools' text observations), so its
trajectories are valid training data and its success shows a query is
solvable from the agent's point of view. `script` is a generator: it yields
tool calls, receives observation strings, and returns the final answer, so
the same decisions drive a text episode in TravelEnv (distillation) and a
direct run on the tools (feasibility checks during synthesis).

On a one-city trip it first plans the simple way: a flight on each leg that
has one, else the road, and the cheapest stay, meals and sights it sees. Only
when that plan fails, and at once on a longer trip, does it search
(star.travel.planner.routes.Search): cities of the state in a fixed shuffle, and
their orders, the other transport modes, the filtered searches that show
stays and cuisines the row cap hid. Every observation is remembered, so a
fact is asked for once, within `max_calls`.
"""

from __future__ import annotations

import random
import re
from collections.abc import Generator
from dataclasses import dataclass

from star.travel.planner.planning import Answer, Knowledge, Option, Planner, give_up
from star.travel.planner.routes import Search, city_order
from star.travel.plans.format import render_itinerary
from star.travel.plans.plan import Day, Plan
from star.travel.world.query import Query

MAX_RETRIES = 3  # per call, when a tool fails transiently
MAX_CALLS = 40  # tool calls per episode, retries included

__all__ = ["Answer", "Call", "Expert", "Knowledge", "Option", "parse_drive", "parse_flights", "parse_hotels", "parse_restaurants", "run_on_tools"]


@dataclass(frozen=True)
class Call:
    thought: str
    name: str
    arguments: dict[str, str]


class OutOfCalls(Exception):
    pass


# ---------------------------------------------------------------- observations

_MONEY = re.compile(r"\$(\d+)")
_KM = re.compile(r"([\d.]+) km")


def _failed(obs: str) -> bool:
    return obs.startswith("Error:") or obs.startswith("No results (")


def _transient(obs: str) -> bool:
    """A failure worth retrying: a wrong argument fails again the same way."""
    return obs.startswith("No results (") or (obs.startswith("Error:") and "retry" in obs.lower())


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
    money, km = _MONEY.search(obs), _KM.search(obs)
    if not money or obs.startswith("No "):
        return None
    return Option("", int(money.group(1)), (float(km.group(1)),) if km else ())


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


class ToolFacts:
    """Facts as tool calls: each distinct call is made once, its answer remembered."""

    complete = False

    def __init__(self, query: Query, max_calls: int | None):
        self.query, self.max_calls = query, max_calls
        self.calls = 0
        self.seen: dict[tuple, str] = {}

    def ask(self, thought: str, name: str, **arguments: str) -> Generator[Call, str, str]:
        key = (name, tuple(sorted(arguments.items())))
        if key in self.seen:
            return self.seen[key]
        for _ in range(MAX_RETRIES):
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise OutOfCalls
            self.calls += 1
            obs = yield Call(thought, name, arguments)
            if not _failed(obs):
                self.seen[key] = obs
                return obs
            if not _transient(obs):
                break
            thought = "Retry."
        return obs

    def state_cities(self, state: str) -> Generator:
        obs = yield from self.ask("Cities in the state.", "SearchCity", state=state)
        return [c.strip() for c in obs.split(",")] if not _failed(obs) else []

    def flights(self, a: str, b: str, day: str) -> Generator:
        return parse_flights((yield from self.ask("Flights.", "SearchFlight", departure=a, destination=b, date=day)))

    def drive(self, a: str, b: str, mode: str) -> Generator:
        return parse_drive((yield from self.ask("Drive.", "GoogleDistanceMatrix", departure=a, destination=b, mode=mode)))

    def road_modes(self, a: str, b: str) -> set[str]:
        """Road modes already asked for (asking again costs nothing)."""
        key = lambda m: ("GoogleDistanceMatrix", tuple(sorted({"departure": a, "destination": b, "mode": m}.items())))
        return {m for m in ("self-driving", "taxi") if key(m) in self.seen}

    def known_hotels(self, city: str) -> list[Option] | None:
        """The plain search's stays if it was made; a new city is searched with filters straight away."""
        obs = self.seen.get(("SearchAccommodation", (("city", city),)))
        return parse_hotels(obs) if obs is not None else None

    def hotels(self, city: str, fitting: bool) -> Generator:
        if not fitting:
            return parse_hotels((yield from self.ask("Hotels.", "SearchAccommodation", city=city)))
        local = self.query.local_constraint
        filters = {"room_type": local.get("room type"), "house_rule": local.get("house rule"), "nights": "2"}
        filters = {k: v for k, v in filters.items() if v}
        return parse_hotels((yield from self.ask("Hotels that fit.", "SearchAccommodation", city=city, **filters)))

    def restaurants(self, city: str, cuisine: str) -> Generator:
        if not cuisine:
            return parse_restaurants((yield from self.ask("Food.", "SearchRestaurant", city=city)))
        return parse_restaurants((yield from self.ask(f"{cuisine} food.", "SearchRestaurant", city=city, cuisine=cuisine)))

    def attractions(self, city: str) -> Generator:
        obs = yield from self.ask("Sights.", "SearchAttraction", city=city)
        return list(dict.fromkeys(_rows(obs))) if not _failed(obs) else []


# ---------------------------------------------------------------- the expert


class Expert:
    def __init__(self, mistake_rate: float = 0.0, top_k: int = 2, upgrade_prob: float = 0.5, max_calls: int | None = MAX_CALLS):
        self.mistake_rate = mistake_rate
        self.top_k = max(1, top_k)
        self.upgrade_prob = upgrade_prob
        self.max_calls = max_calls
        self.planner = Planner(self.top_k, upgrade_prob)

    def script(self, query: Query, rng: random.Random, max_calls: int | None = None) -> Generator[Call, str, Answer]:
        """`max_calls` caps this episode's tool calls (default: the expert's own cap)."""
        facts = ToolFacts(query, self.max_calls if max_calls is None else max_calls)
        k = query.visiting_city_number
        if query.days != 2 * k + 1:
            return give_up(query, f"{query.days} days cannot visit {k} cities")
        first, search, found = give_up(query, "out of tool calls"), None, None
        try:
            order = city_order(query, (yield from facts.state_cities(query.dest)) if k > 1 else [])
            if len(order) < k:
                return give_up(query, "not enough cities in the state")
            if k == 1:  # the simple plan first; a longer trip searches at once, its legs fail too often
                first = yield from self._first_try(query, order, facts, rng)
                if first.ok:
                    return self.finish(first, rng)
            search = Search(query, facts, self.planner, rng)
            found = yield from search.run(order)
            if found is None and k > 1:
                first = give_up(query, "no feasible route")
        except OutOfCalls:
            pass
        if found is None:
            best = search.best if search and search.best and (not first.plan.days or search.best.cost < first.cost) else first
            return self.finish(best, rng)
        try:  # say the road mode the plan takes, when the search only derived its cost
            for mode, a, b in search.road_legs():
                yield from facts.drive(a, b, mode)
        except OutOfCalls:
            pass
        return self.finish(found, rng)

    def _first_try(self, query: Query, cities: list[str], facts: ToolFacts, rng: random.Random) -> Generator:
        """Fly where possible; a leg without flights goes by taxi after a flight
        and by car otherwise, and once driving, keep the car (modes never conflict)."""
        know = Knowledge(cities=cities)
        route = [query.org, *cities, query.org]
        constraint = query.local_constraint
        no_flight = constraint.get("transportation") == "no flight"
        no_drive = constraint.get("transportation") == "no self-driving"
        for j in range(len(route) - 1):
            a, b, day = route[j], route[j + 1], query.date[min(2 * j, len(query.date) - 1)]
            modes = {m for m, _ in know.legs}
            leg: tuple[str, Option | None] = ("none", None)
            if not no_flight and "self-driving" not in modes:
                flights = yield from facts.flights(a, b, day)
                if flights:
                    leg = ("flight", flights[0])
            if leg[1] is None:
                mode = "taxi" if no_drive or "flight" in modes or "taxi" in modes else "self-driving"
                leg = (mode, (yield from facts.drive(a, b, mode)))
            know.legs.append(leg)
        for city in cities:
            know.hotels[city] = yield from facts.hotels(city, False)
            know.restaurants[city] = yield from facts.restaurants(city, "")
            know.attractions[city] = yield from facts.attractions(city)
        return self.planner.plan(query, know, rng)

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
