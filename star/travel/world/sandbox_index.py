"""The sandbox as the evaluator looks it up, built once per Sandbox.

Two views: official (complete rows only, a written name matches every row
whose name contains it, the first in table order wins) and strict (every
row, exact name and city, the first such row). Flights, distances and city
states are read here too.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl

from star.travel.plans.plan_text import before_paren
from star.travel.world.sandbox import Sandbox


@dataclass(frozen=True, slots=True)
class Restaurant:
    name: str
    city: str
    cost: int
    cuisines: str


@dataclass(frozen=True, slots=True)
class Hotel:
    name: str
    city: str
    price: int
    room_type: str
    house_rules: str
    minimum_nights: int | None
    max_occupancy: int


@dataclass(frozen=True, slots=True)
class Attraction:
    name: str
    city: str


def _complete_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """The rows the official tools keep: they drop any row with a missing value."""
    return frame.drop_nulls()


def _first_rows(rows: Iterable[Any]) -> dict[tuple[str, str], Any]:
    """The first row of each (name, city), in table order.

    A name can appear twice in a city with different prices (27 restaurants
    and one hotel in the public database). The official code charges the
    first matching row: `get_total_cost` in evaluation/hard_constraint.py
    reads `res['Average Cost'].values[0]` / `res['price'].values[0]`, and the
    room rule, room type and cuisine checks read `.values[0]` / `.iloc[0]`.
    Strict follows it, so both modes price a duplicate alike.
    """
    first: dict[tuple[str, str], Any] = {}
    for row in rows:
        first.setdefault((row.name.strip(), row.city.strip()), row)
    return first


class SandboxIndex:
    """Per-city look-ups built once per Sandbox, for fast evaluation."""

    _CACHE_LIMIT = 200_000

    def __init__(self, sandbox: Sandbox):
        self.city_state: dict[str, str] = dict(sandbox.cities.select("city", "state").iter_rows())
        self.states: set[str] = set(self.city_state.values())

        def restaurants(frame: pl.DataFrame) -> list[Restaurant]:
            return [
                Restaurant(str(n), c, cost or 0, cu or "")
                for n, c, cost, cu in frame.select("name", "city", "cost", "cuisines").iter_rows()
                if n is not None and c is not None
            ]

        def hotels(frame: pl.DataFrame) -> list[Hotel]:
            cols = ("name", "city", "price", "room_type", "house_rules", "minimum_nights", "max_occupancy")
            return [
                Hotel(str(n), c, p or 0, rt or "", hr or "", mn, mo or 1)
                for n, c, p, rt, hr, mn, mo in frame.select(cols).iter_rows()
                if n is not None and c is not None
            ]

        def attractions(frame: pl.DataFrame) -> list[Attraction]:
            return [
                Attraction(str(n), c)
                for n, c in frame.select("name", "city").iter_rows()
                if n is not None and c is not None
            ]

        # Official view: complete rows, grouped by city, in table order.
        self._by_city: dict[str, dict[str, list[Any]]] = {}
        for kind, rows in (
            ("restaurant", restaurants(_complete_rows(sandbox.restaurants))),
            ("hotel", hotels(_complete_rows(sandbox.accommodations))),
            ("attraction", attractions(_complete_rows(sandbox.attractions))),
        ):
            groups: dict[str, list[Any]] = {}
            for row in rows:
                groups.setdefault(row.city, []).append(row)
            self._by_city[kind] = groups
        # Strict view: every row, exact (trimmed) name and city, first row (as officially).
        self._exact: dict[str, dict[tuple[str, str], Any]] = {
            "restaurant": _first_rows(restaurants(sandbox.restaurants)),
            "hotel": _first_rows(hotels(sandbox.accommodations)),
            "attraction": _first_rows(attractions(sandbox.attractions)),
        }

        # Flights: official by (number, origin, dest), priced by number alone; strict also by date.
        self._flight_routes: set[tuple[str, str, str]] = set()
        self._flight_price: dict[str, int] = {}
        complete = _complete_rows(sandbox.flights)
        for no, o, d, price in complete.select("flight_number", "origin", "dest", "price").iter_rows():
            self._flight_routes.add((no, o, d))
            self._flight_price.setdefault(no, price)
        self._flight_dated: dict[tuple[str, str, str, str], int] = {}
        self._any_flight_price: dict[str, int] = {}
        every = sandbox.flights.select("flight_number", "origin", "dest", "date", "price")
        for no, o, d, date, price in every.iter_rows():
            self._flight_dated.setdefault((no, o, d, date), price or 0)
            self._any_flight_price.setdefault(no, price or 0)

        # Distances are read whole (the official tool keeps incomplete rows); first row wins.
        self._distance: dict[tuple[str, str], tuple[str | None, float | None]] = {}
        for o, d, duration, km in sandbox.distances.select("origin", "dest", "duration", "distance_km").iter_rows():
            self._distance.setdefault((o, d), (duration, km))

        self._matches: dict[tuple[str, str, str], tuple[Any, ...]] = {}

    # official look-ups
    def matches(self, kind: str, needle: str, city: str) -> tuple[Any, ...]:
        """Rows of `city` whose name contains `needle`, in table order."""
        key = (kind, needle, city)
        hit = self._matches.get(key)
        if hit is None:
            if len(self._matches) > self._CACHE_LIMIT:
                self._matches.clear()
            hit = tuple(r for r in self._by_city[kind].get(city, ()) if needle in r.name)
            self._matches[key] = hit
        return hit

    def first(self, kind: str, needle: str, city: str) -> Any | None:
        hit = self.matches(kind, needle, city)
        return hit[0] if hit else None

    def flight_exists(self, number: str, origin: str, dest: str) -> bool:
        return (number, origin, dest) in self._flight_routes

    def flight_price(self, number: str) -> int | None:
        return self._flight_price.get(number)

    # strict look-ups
    def exact(self, kind: str, name: str, city: str) -> Any | None:
        return self._exact[kind].get((name.strip(), city.strip()))

    def dated_flight_price(self, number: str, origin: str, dest: str, date: str | None) -> int | None:
        return self._flight_dated.get((number, origin, dest, date))

    def any_flight_price(self, number: str) -> int | None:
        return self._any_flight_price.get(number)

    # both
    def drive_cost(self, origin: str, dest: str, mode: str) -> int | None:
        """Cost of a self-driving or taxi leg, None when the sandbox has no cost for it."""
        duration, km = self._distance.get((before_paren(origin), before_paren(dest)), (None, None))
        if duration is None or km is None or "day" in duration:
            return None
        return int(km * 0.05) if mode == "self-driving" else int(km)


_INDEXES: dict[int, tuple[weakref.ref, SandboxIndex]] = {}


def index_for(sandbox: Sandbox | SandboxIndex) -> SandboxIndex:
    """The cached index of a sandbox (built on first use)."""
    if isinstance(sandbox, SandboxIndex):
        return sandbox
    hit = _INDEXES.get(id(sandbox))
    if hit is not None and hit[0]() is sandbox:
        return hit[1]
    index = SandboxIndex(sandbox)
    key = id(sandbox)
    _INDEXES[key] = (weakref.ref(sandbox, lambda _: _INDEXES.pop(key, None)), index)
    return index
