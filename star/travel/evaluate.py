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
`star.travel.plan`: a day missing a key is read as "-" (the official script
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
import math
import re
import sys
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from star.io import write_jsonl
from star.travel.plan import Plan, read_submission
from star.travel.query import LEVELS, Query, read_queries
from star.travel.sandbox import Sandbox, load_travelplanner

MODES = ("official", "strict")
COMMONSENSE = (
    "within_sandbox",
    "complete_information",
    "within_current_city",
    "reasonable_city_route",
    "diverse_restaurants",
    "diverse_attractions",
    "non_conflicting_transportation",
    "minimum_nights_stay",
)
HARD = ("budget", "room_rule", "cuisine", "room_type", "transportation")
# query.local_constraint key -> hard constraint
LOCAL_TO_HARD = {
    "house rule": "room_rule",
    "cuisine": "cuisine",
    "room type": "room_type",
    "transportation": "transportation",
}
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
PLACEHOLDER_CITY = "You don't need to fill in the information for this or later days."
HOUSE_RULE_TEXT = {
    "smoking": "No smoking",
    "parties": "No parties",
    "children under 10": "No children under 10",
    "visitors": "No visitors",
    "pets": "No pets",
}
ROOM_TYPE_OK: dict[str, Callable[[str], bool]] = {
    "not shared room": lambda t: t != "Shared room",
    "shared room": lambda t: t == "Shared room",
    "private room": lambda t: t == "Private room",
    "entire room": lambda t: t == "Entire home/apt",
}


# ---------------------------------------------------------------- text parsing
# These patterns reproduce how the official scripts cut plan text.
_FROM_TO = re.compile(r"from\s+(?P<a>.+?)\s+to\s+(?P<b>[^,]+)(?=[,\s]|$)")
_BEFORE_PAREN = re.compile(r"^(?P<head>.*?)\([^)]*\)")
_NAME_CITY = re.compile(r"(?P<name>.*?),\s*(?P<city>[^,]+)(\(\w[\w\s]*\))?$")
# Strict: the name is everything before the last comma, newlines included
# (officially "." stops at a newline, so only the name's last line is read).
_NAME_CITY_DOTALL = re.compile(_NAME_CITY.pattern, re.DOTALL)
_FLIGHT_NO = re.compile(r"flight number:\s*(?P<no>[^,\s]+)", re.IGNORECASE)


@lru_cache(maxsize=1 << 16)
def _from_to(text: str) -> tuple[str, str] | None:
    m = _FROM_TO.search(text)
    return (m["a"], m["b"]) if m else None


@lru_cache(maxsize=1 << 16)
def _before_paren(text: str) -> str:
    m = _BEFORE_PAREN.search(text)
    return m["head"] if m else text


@lru_cache(maxsize=1 << 16)
def _name_city(text: str, strict: bool = False) -> tuple[str, str]:
    """'Name, City' -> (name, city); ('-', '-') when there is no comma."""
    last = text.rfind(",")
    if last < 0:
        return "-", "-"
    # The city is everything after the last comma, and the name cannot start before the
    # line holding it ("." stops at a newline unless strict). One match from there gives
    # what the search gives, in linear time; the search would try every start.
    start = 0 if strict else text.rfind("\n", 0, last) + 1
    m = (_NAME_CITY_DOTALL if strict else _NAME_CITY).match(text, start)
    if not m:
        return "-", "-"
    return m["name"].strip(), _before_paren(m["city"].strip()).strip()


def _given(value: str) -> bool:
    return bool(value) and value != "-"


def _blank(value: str) -> bool:
    return value in ("", "-")


def _city(text: str, strict: bool) -> str:
    cut = _before_paren(text)
    return cut.strip() if strict else cut


def _day_cities(current_city: str, strict: bool) -> list[str] | None:
    """[from, to] on a travel day, [city] otherwise; None when unreadable."""
    if "from" in current_city:
        pair = _from_to(current_city)
        if pair is None:
            return None  # the official scripts raise here
        return [_city(pair[0], strict), _city(pair[1], strict)]
    return [_city(current_city, strict)]


def _pieces(attraction: str, strict: bool) -> list[str]:
    parts = attraction.split(";")
    if strict:
        return [p.strip() for p in parts if p.strip()]
    return parts[:-1]  # official: the last piece is dropped


def _item_key(text: str) -> tuple[str, str]:
    """Identity of an item for the strict repeat checks."""
    name, city = _name_city(text, True)
    return (name, city) if (name, city) != ("-", "-") else (text.strip(), "")


def _official_mode(text: str) -> str | None:
    """The official conflict check's reading of a leg."""
    low = text.lower()
    if "taxi" in low:
        return "taxi"
    if "self-driving" in low:
        return "self-driving"
    if "flight" in low:
        return "flight"
    return None


def _strict_mode(text: str) -> str | None:
    low = text.lower()
    for mode in ("flight", "self-driving", "taxi"):
        if mode in low:
            return mode
    return None


# ----------------------------------------------------------------- the index
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
        duration, km = self._distance.get((_before_paren(origin), _before_paren(dest)), (None, None))
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


# ------------------------------------------------------------- one plan, read
@dataclass(slots=True)
class _Day:
    # None is a JSON null, kept in official mode only (see `_text`).
    number: Any
    current_city: str | None
    transportation: str | None
    breakfast: str | None
    attraction: str | None
    lunch: str | None
    dinner: str | None
    accommodation: str | None

    @property
    def meals(self) -> tuple[str | None, str | None, str | None]:
        return self.breakfast, self.lunch, self.dinner


def _text(value: Any, strict: bool) -> Any:
    """A field as the checks read it.

    Official mode keeps a null as None, for the checks to treat it as the
    official code does (see the module doc): `_given(None)` and
    `_blank(None)` are both False, and a check that would hand None to a
    string function raises, which fails it. Strict reads a null as "-".
    """
    if isinstance(value, str):
        return value
    if value is None:
        return "-" if strict else None
    return str(value)


def _read_day(day: Any, strict: bool) -> _Day:
    get = (lambda k: day.get(k)) if isinstance(day, dict) else (lambda k: getattr(day, k, None))
    fields = ("current_city", "transportation", "breakfast", "attraction", "lunch", "dinner", "accommodation")
    return _Day(get("days"), *(_text(get(k), strict) for k in fields))


@dataclass(slots=True)
class _Ctx:
    q: Query
    days: list[_Day]
    ix: SandboxIndex
    strict: bool

    def item(self, kind: str, text: str) -> Any | None:
        name, city = _name_city(text, self.strict)
        return self.ix.exact(kind, name, city) if self.strict else self.ix.first(kind, name, city)


# --------------------------------------------------------- commonsense checks
def _within_sandbox(c: _Ctx) -> bool:
    for i, d in enumerate(c.days):
        t = d.transportation
        if _given(t) and not _leg_exists(c, i, d):
            return False
        for meal in d.meals:
            if _given(meal) and c.item("restaurant", meal) is None:
                return False
        if _given(d.attraction):
            for piece in _pieces(d.attraction, c.strict):
                if c.item("attraction", piece) is None:
                    return False
        if _given(d.accommodation) and c.item("hotel", d.accommodation) is None:
            return False
    return True


def _leg_ends(d: _Day) -> tuple[str, str] | None:
    """A leg's cities: from its own text, else from the day's current city."""
    return _from_to(d.transportation) or _from_to(d.current_city)


def _leg_exists(c: _Ctx, i: int, d: _Day) -> bool:
    t = d.transportation
    ends = _leg_ends(d)
    if c.strict:
        mode = _strict_mode(t)
        if mode is None or ends is None:
            return False
        o, de = _city(ends[0], True), _city(ends[1], True)
        if mode == "flight":
            m = _FLIGHT_NO.search(t)
            date = c.q.date[i] if i < len(c.q.date) else None
            return m is not None and c.ix.dated_flight_price(m["no"], o, de, date) is not None
        return c.ix.drive_cost(o, de, mode) is not None
    low = t.lower()
    if "flight number" in low:
        parts = t.split("Flight Number: ")
        if ends is None or len(parts) < 2:
            return False  # the official scripts raise here
        return c.ix.flight_exists(parts[1].split(",")[0], _before_paren(ends[0]), _before_paren(ends[1]))
    if "self-driving" in low or "taxi" in low:
        o, de = (ends[0], ends[1]) if ends else ("-", "-")
        return c.ix.drive_cost(o, de, "self-driving" if "self-driving" in low else "taxi") is not None
    return True  # official: other kinds of legs are not looked up


def _complete_information(c: _Ctx) -> bool:
    q, days = c.q, c.days
    if len(days) < q.days or any(d.current_city == PLACEHOLDER_CITY for d in days):
        return False
    visited: set[str] = set()
    for i, d in enumerate(days):
        cities = _day_cities(d.current_city, c.strict)
        if cities is None:
            return False
        if len(cities) == 2 and i == 0 and cities[0] != q.org:
            return False
        visited.update(cities)
    visited.discard(q.org)
    if len(visited) != q.visiting_city_number:
        return False
    filled = 0
    for i, d in enumerate(days):
        cc = d.current_city
        leaving = "from " in cc
        if (leaving or "to " in cc) and _blank(d.transportation):
            return False
        if not leaving and " to " not in cc and _blank(d.attraction):
            return False
        if i != q.days - 1 and _blank(d.accommodation):
            return False
        if not leaving and any(_blank(m) for m in d.meals):
            return False
        filled += bool(d.number) + sum(
            _given(v)
            for v in (cc, d.transportation, d.breakfast, d.attraction, d.lunch, d.dinner, d.accommodation)
        )
    return filled / (6 * q.days) >= 0.5


def _within_current_city(c: _Ctx) -> bool:
    for d in c.days:
        cities = _day_cities(d.current_city, c.strict)
        if cities is None:
            return False
        t = d.transportation
        if c.strict:
            if _given(t) and not all(city in t for city in cities):
                return False
            items = [m for m in d.meals if _given(m)]
            if _given(d.attraction):
                items += _pieces(d.attraction, True)
            if any(_name_city(x, True)[1] not in cities for x in items):
                return False
            if _given(d.accommodation) and _name_city(d.accommodation, True)[1] != cities[-1]:
                return False
            continue
        # Official: on a day without travel the "cities" are the letters of the name.
        places: Sequence[str] = cities if len(cities) == 2 else cities[0]
        if _given(t) and any(p not in t for p in places):
            return False
        items = [m for m in d.meals if _given(m)]
        if _given(d.attraction):
            items += _pieces(d.attraction, False)
        if any(not any(p in x for p in places) for x in items):
            return False
        if _given(d.accommodation) and (not places or places[-1] not in d.accommodation):
            return False
    return True


def _valid_sequence(cities: list[str]) -> bool:
    """Each city one consecutive stay; a middle stay lasts two entries or more."""
    n = len(cities)
    if n < 3:
        return False
    seen: set[str] = set()
    start = 0
    while start < n:
        city = cities[start]
        end = start
        while end < n and cities[end] == city:
            end += 1
        if city in seen and start not in (0, n - 1):
            return False
        if end - start == 1 and 0 < start < n - 1:
            return False
        seen.add(city)
        start = end
    return True


def _reasonable_city_route(c: _Ctx) -> bool:
    q = c.q
    route: list[str] = []
    for i, d in enumerate(c.days):
        cities = _day_cities(d.current_city, c.strict)
        if cities is None:
            return False
        if i == 0:
            leaves_origin = len(cities) == 2 and cities[0] == q.org
            # Official: only a travel day 1 is checked; strict: day 1 must leave the origin.
            if not leaves_origin and (c.strict or len(cities) == 2):
                return False
        route += cities
    if not route or route[0] != route[-1] or not _valid_sequence(route):
        return False
    # A multi-city trip goes to a state, a one-city trip to a city. Decided by
    # the query's city count, not by the name: Washington is both.
    dest_is_state = q.visiting_city_number > 1
    for k, city in enumerate(route):
        state = c.ix.city_state.get(city)
        if state is None:
            return False
        if 0 < k < len(route) - 1:
            if c.strict and (state != q.dest if dest_is_state else city != q.dest):
                return False
            if not c.strict and q.days > 3 and state != q.dest:
                return False
    return True


def _diverse_restaurants(c: _Ctx) -> bool:
    seen: set[Any] = set()
    for d in c.days:
        for meal in d.meals:
            if _given(meal):
                key = _item_key(meal) if c.strict else meal
                if key in seen:
                    return False
                seen.add(key)
    return True


def _diverse_attractions(c: _Ctx) -> bool:
    seen: set[Any] = set()
    for d in c.days:
        if _given(d.attraction):
            for piece in _pieces(d.attraction, c.strict):
                key = _item_key(piece) if c.strict else piece
                if key in seen:
                    return False
                seen.add(key)
    return True


def _non_conflicting_transportation(c: _Ctx) -> bool:
    if not _given(c.days[0].transportation):
        return False  # official: day 1 must have a leg
    read = _strict_mode if c.strict else _official_mode
    modes = {read(d.transportation) for d in c.days if _given(d.transportation)}
    return not ("self-driving" in modes and ("flight" in modes or "taxi" in modes))


def _minimum_nights_stay(c: _Ctx) -> bool:
    stays: list[list[Any]] = []  # [key, nights, text]
    for d in c.days:
        a = d.accommodation
        key = _item_key(a) if c.strict and _given(a) else a
        if stays and stays[-1][0] == key:
            stays[-1][1] += 1
        else:
            stays.append([key, 1, a])
    for _, nights, text in stays:
        if _blank(text):
            continue
        if c.strict:
            hotel = c.item("hotel", text)
        else:
            hits = c.ix.matches("hotel", *_name_city(text))
            hotel = hits[0] if len(hits) == 1 else None  # official: only a unique match is checked
        if hotel is not None and hotel.minimum_nights is not None and nights < hotel.minimum_nights:
            return False
    return True


_COMMONSENSE_CHECKS: dict[str, Callable[[_Ctx], bool]] = {
    "within_sandbox": _within_sandbox,
    "complete_information": _complete_information,
    "within_current_city": _within_current_city,
    "reasonable_city_route": _reasonable_city_route,
    "diverse_restaurants": _diverse_restaurants,
    "diverse_attractions": _diverse_attractions,
    "non_conflicting_transportation": _non_conflicting_transportation,
    "minimum_nights_stay": _minimum_nights_stay,
}


# --------------------------------------------------------------- hard checks
def total_cost(c: _Ctx) -> int:
    people = c.q.people_number
    cost = 0
    for i, d in enumerate(c.days):
        if _given(d.transportation):
            cost += _leg_cost(c, i, d)
        for meal in d.meals:
            if _given(meal):
                r = c.item("restaurant", meal)
                cost += r.cost * people if r else 0
        if _given(d.accommodation):
            h = c.item("hotel", d.accommodation)
            cost += h.price * math.ceil(people / max(h.max_occupancy, 1)) if h else 0
    return cost


def _leg_cost(c: _Ctx, i: int, d: _Day) -> int:
    t = d.transportation
    people = c.q.people_number
    ends = _leg_ends(d)
    if ends is None:
        return 0
    if c.strict:
        mode = _strict_mode(t)
        o, de = _city(ends[0], True), _city(ends[1], True)
        if mode == "flight":
            m = _FLIGHT_NO.search(t)
            if m is None:
                return 0
            date = c.q.date[i] if i < len(c.q.date) else None
            price = c.ix.dated_flight_price(m["no"], o, de, date)
            price = c.ix.any_flight_price(m["no"]) if price is None else price
            return (price or 0) * people
    else:
        low = t.lower()
        o, de = ends
        if "flight number" in low:
            parts = t.split("Flight Number: ")
            price = c.ix.flight_price(parts[1].split(",")[0]) if len(parts) > 1 else None
            return (price or 0) * people
        mode = "self-driving" if "self-driving" in low else "taxi" if "taxi" in low else None
    if mode in ("self-driving", "taxi"):
        per_car = 5 if mode == "self-driving" else 4
        return (c.ix.drive_cost(o, de, mode) or 0) * math.ceil(people / per_car)
    return 0


def _local(q: Query, key: str) -> Any:
    value = q.local_constraint.get(key)
    return value if value not in (None, "", []) else None


def _room_rule(c: _Ctx, rule: Any) -> bool:
    banned = HOUSE_RULE_TEXT.get(rule)
    for d in c.days:
        if _given(d.accommodation):
            h = c.item("hotel", d.accommodation)
            if h is not None and banned is not None and banned in h.house_rules:
                return False
    return True


def _room_type(c: _Ctx, wanted: Any) -> bool:
    ok = ROOM_TYPE_OK.get(wanted)
    for d in c.days:
        if _given(d.accommodation):
            h = c.item("hotel", d.accommodation)
            if h is not None and ok is not None and not ok(h.room_type):
                return False
    return True


def _cuisine(c: _Ctx, wanted: Any) -> bool:
    wanted = [wanted] if isinstance(wanted, str) else [str(w) for w in wanted]
    found: set[str] = set()
    for d in c.days:
        for meal in d.meals:
            if not _given(meal):
                continue
            if _name_city(meal, c.strict)[1] == c.q.org:
                if c.strict:
                    continue
                break  # official: a meal at home ends that day's meals
            r = c.item("restaurant", meal)
            if r is None:
                continue
            if c.strict:
                served = {x.strip() for x in r.cuisines.split(",")}
                found.update(w for w in wanted if w in served)
            else:
                found.update(w for w in wanted if w in r.cuisines)
    if c.strict:
        return set(wanted) <= found
    return len(found) == len(wanted)  # repeated names in the query never pass


def _transportation(c: _Ctx, rule: Any) -> bool:
    for d in c.days:
        t = d.transportation
        if not _given(t):
            continue
        if c.strict:
            mode = _strict_mode(t)
            if (rule == "no flight" and mode == "flight") or (rule == "no self-driving" and mode == "self-driving"):
                return False
        elif (rule == "no flight" and "Flight" in t) or (rule == "no self-driving" and "Self-driving" in t):
            return False
    return True


_LOCAL_CHECKS: dict[str, Callable[[_Ctx, Any], bool]] = {
    "house rule": _room_rule,
    "cuisine": _cuisine,
    "room type": _room_type,
    "transportation": _transportation,
}


# ------------------------------------------------------------------ results
def hard_set(query: Query) -> tuple[str, ...]:
    """The hard constraints a query sets: budget always, locals when given."""
    return ("budget",) + tuple(LOCAL_TO_HARD[k] for k in _LOCAL_CHECKS if _local(query, k) is not None)


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
        days = [_read_day(d, mode == "strict") for d in plan.days[: query.days]]
    except Exception:
        return undelivered
    if not days:
        return undelivered

    c = _Ctx(query, days, ix, mode == "strict")
    commonsense: dict[str, bool | None] = {k: _verdict(f, c) for k, f in _COMMONSENSE_CHECKS.items()}
    try:
        cost: int | None = total_cost(c)
    except Exception:
        cost = None
    hard: dict[str, bool | None] = dict.fromkeys(HARD)
    if c.strict or (commonsense["complete_information"] and commonsense["within_sandbox"]):
        hard["budget"] = cost is not None and cost <= query.budget
        for key, check in _LOCAL_CHECKS.items():
            value = _local(query, key)
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


# ------------------------------------------------------------------ metrics
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
    parser = argparse.ArgumentParser(prog="python -m star.travel.evaluate", description=__doc__.splitlines()[0])
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
