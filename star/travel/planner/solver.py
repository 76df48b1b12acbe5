"""Feasibility over the full sandbox: the route search of star.travel.planner.routes on the tables themselves.

The solver reads every complete row, as the official evaluator does, and
looks each name up the way the evaluator will (a name that first matches
another row is priced by that row, so such rows are left out). Its plan,
checked by the evaluator, proves that a query can be solved.
"""

from __future__ import annotations

import random
from collections.abc import Generator

from star.travel.planner.planning import Answer, Option, Planner, give_up
from star.travel.planner.routes import MAX_ROUTES, Search, city_order, drive_options
from star.travel.world.query import Query
from star.travel.world.sandbox import Sandbox
from star.travel.world.sandbox_index import index_for
from star.travel.world.tools import TravelTools


class TableFacts:
    """The sandbox as the evaluator reads it: complete rows, each name looked up as it will be."""

    complete = True

    def __init__(self, sandbox: Sandbox):
        tools, ix = TravelTools(sandbox), index_for(sandbox)
        self.tools = tools
        self._hotels: dict[str, list[Option]] = {}
        for (city,), rows in tools.hotels.items():
            for r in sorted(rows, key=lambda r: (r["price"], r["name"])):
                seen = ix.first("hotel", r["name"].strip(), city)
                # A name that first matches another row is priced and ruled by that row.
                if seen and (seen.price, seen.room_type, seen.house_rules, seen.max_occupancy) == (r["price"], r["room_type"], r["house_rules"], r["max_occupancy"]):
                    self._hotels.setdefault(city, []).append(Option(r["name"], r["price"], (r["room_type"], r["minimum_nights"], r["max_occupancy"], r["house_rules"])))
        self._food: dict[str, list[Option]] = {}
        for (city,), rows in tools.restaurants.items():
            for r in sorted(rows, key=lambda r: (r["cost"], r["name"])):
                seen = ix.first("restaurant", r["name"].strip(), city)
                if seen and (seen.cost, seen.cuisines) == (r["cost"], r["cuisines"]):
                    self._food.setdefault(city, []).append(Option(r["name"], r["cost"], tuple(c.strip() for c in r["cuisines"].split(","))))
        self._sights: dict[str, list[str]] = {}
        for (city,), rows in tools.attractions.items():
            names = [r["name"] for r in rows if ";" not in r["name"] and ix.first("attraction", r["name"].strip(), city)]
            self._sights[city] = list(dict.fromkeys(names))

    # Generators that never yield: the facts are at hand.
    def state_cities(self, state: str) -> Generator:
        return list(self.tools.state_cities.get(state, []))
        yield

    def flights(self, a: str, b: str, day: str) -> Generator:
        rows = sorted(self.tools.flights.get((a, b, day), []), key=lambda r: (r["price"], r["flight_number"]))
        return [Option(r["flight_number"], r["price"]) for r in rows]
        yield

    def drive(self, a: str, b: str, mode: str) -> Generator:
        row = self.tools.distances.get((a, b))
        if row is None or row["distance_km"] is None or row["duration"] is None or "day" in row["duration"]:
            return None
        return drive_options(Option("", 0, (row["distance_km"],)))[mode]
        yield

    def road_modes(self, a: str, b: str) -> set[str]:
        return set()

    def known_hotels(self, city: str) -> list[Option] | None:
        return list(self._hotels.get(city, []))

    def hotels(self, city: str, fitting: bool) -> Generator:
        return list(self._hotels.get(city, []))
        yield

    def restaurants(self, city: str, cuisine: str) -> Generator:
        return list(self._food.get(city, []))
        yield

    def attractions(self, city: str) -> Generator:
        return list(self._sights.get(city, []))
        yield


def settle(gen: Generator):
    """The value of a generator that must not yield."""
    try:
        next(gen)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the solver's facts asked for a tool call")


class Solver:
    """The cheapest plan on the first route, in the expert's order, that works (within the budget, when one is set)."""

    def __init__(self, sandbox: Sandbox, max_routes: int = MAX_ROUTES):
        self.facts = TableFacts(sandbox)
        self.max_routes = max_routes

    def solve(self, query: Query) -> Answer:
        k = query.visiting_city_number
        if query.days != 2 * k + 1:
            return give_up(query, f"{query.days} days cannot visit {k} cities")
        order = city_order(query, settle(self.facts.state_cities(query.dest)) if k > 1 else [])
        search = Search(query, self.facts, Planner(1, 0.0), random.Random(0), self.max_routes)
        found = settle(search.run(order))
        if found is not None:
            return found
        return search.best or give_up(query, "no feasible route")

