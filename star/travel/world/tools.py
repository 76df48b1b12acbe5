"""The six STAR tools over a Sandbox, with TravelPlanner semantics.

Observations are short and deterministic: one line per row, cheapest first,
at most `row_cap` rows, entity names written exactly as in the sandbox so
the same name reads the same in the query, the call and the plan. Lookups
are dicts built once, and each distinct answer is rendered once.

The row cap can hide the only place that fits a query (a room type, a house
rule, a short stay, a cuisine), so SearchAccommodation and SearchRestaurant
take optional filters in the query's own words. Without them a tool answers
as the official one does (every row, cheapest first, then the cap).
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import date as Date
from functools import lru_cache

import polars as pl

from star.env.core import Tool, ToolError, ToolResult
from star.travel.evaluation.hard import HOUSE_RULE_TEXT, ROOM_TYPE_OK
from star.travel.world.sandbox import Sandbox

_PAREN = re.compile(r"\(.*$")


def clean_city(name: str) -> str:
    """'Dallas(Texas)' -> 'Dallas', as the official tools accept."""
    return _PAREN.sub("", name).strip()


def _groups(frame: pl.DataFrame, *keys: str) -> dict[tuple, list[dict]]:
    grouped: dict[tuple, list[dict]] = defaultdict(list)
    for row in frame.iter_rows(named=True):
        grouped[tuple(row[k] for k in keys)].append(row)
    return dict(grouped)


def _price(row: dict, key: str) -> float:
    value = row[key]
    return float("inf") if value is None else value


def _value(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _hotel_fits(row: dict, room_type: str, house_rule: str, nights: str) -> bool:
    if room_type and not ROOM_TYPE_OK[room_type](row["room_type"]):
        return False
    if house_rule and HOUSE_RULE_TEXT[house_rule] in (row["house_rules"] or ""):
        return False
    return not nights or (row["minimum_nights"] or 0) <= int(nights)


def _serves(cuisines: str | None, cuisine: str) -> bool:
    return cuisine.lower() in {c.strip().lower() for c in (cuisines or "").split(",")}


def _matching(room_type: str, house_rule: str, nights: str) -> str:
    parts = [room_type, f"allowing {house_rule}" if house_rule else "", f"for {nights} nights" if nights else ""]
    return " matching " + ", ".join(p for p in parts if p) if any(parts) else ""


class TravelTools:
    """Holds the sandbox lookups; its public Search* methods are the tools."""

    def __init__(self, sandbox: Sandbox, row_cap: int = 5):
        self.row_cap = row_cap
        self.state_cities = {
            s: sorted(g["city"] for g in rows) for (s,), rows in _groups(sandbox.cities, "state").items()
        }
        # Like the official tools, rows with a missing value are not shown (the
        # official evaluation does not know them either); distances are kept whole.
        self.flights = _groups(sandbox.flights.drop_nulls(), "origin", "dest", "date")
        self.routes = {(o, d) for o, d, _ in self.flights}
        self.distances = {}
        for r in sandbox.distances.iter_rows(named=True):
            self.distances.setdefault((r["origin"], r["dest"]), r)
        self.hotels = _groups(sandbox.accommodations.drop_nulls(), "city")
        self.restaurants = _groups(sandbox.restaurants.drop_nulls(), "city")
        self.attractions = _groups(sandbox.attractions.drop_nulls(), "city")
        self.cities = set(sandbox.cities["city"])
        for table in (self.hotels, self.restaurants, self.attractions):
            self.cities |= {c for (c,) in table}
        self.cities |= {c for pair in self.routes for c in pair}
        dates = sandbox.flights["date"].drop_nulls()
        self.first_date, self.last_date = (dates.min(), dates.max()) if len(dates) else (None, None)
        # bound, per-instance memo of rendered answers
        self._render = lru_cache(maxsize=None)(self._render_uncached)

    def as_tools(self) -> list[Tool]:
        return [
            Tool(self.GoogleDistanceMatrix),
            Tool(self.SearchAccommodation),
            Tool(self.SearchAttraction),
            Tool(self.SearchCity),
            Tool(self.SearchFlight),
            Tool(self.SearchRestaurant),
        ]

    # -- helpers -------------------------------------------------------------

    def _city(self, name: str, role: str = "city") -> str:
        city = clean_city(name)
        if not city:
            raise ToolError(f"{role} is empty.")
        if city not in self.cities:
            raise ToolError(f"unknown {role} '{name}'.")
        return city

    def _rows(self, lines: list[str], empty: str) -> str | ToolResult:
        if not lines:
            return ToolResult(empty, True, "empty")
        more = len(lines) - self.row_cap
        shown = lines[: self.row_cap]
        if more > 0:
            shown.append(f"({more} more)")
        return "\n".join(shown)

    def _render_uncached(self, kind: str, *key: str) -> str | ToolResult:
        if kind == "flight":
            rows = sorted(self.flights.get(key, []), key=lambda r: (_price(r, "price"), r["flight_number"]))
            lines = [f"{r['flight_number']} | {r['dep_time']}-{r['arr_time']} | ${r['price']}" for r in rows]
            return self._rows(lines, f"No flights from {key[0]} to {key[1]} on {key[2]}.")
        if kind == "hotel":
            city, room_type, house_rule, nights = key
            rows = sorted(self.hotels.get((city,), []), key=lambda r: (_price(r, "price"), _value(r["name"])))
            rows = [r for r in rows if _hotel_fits(r, room_type, house_rule, nights)]
            lines = [
                f"{_value(r['name'])} | {r['room_type']} | ${_value(r['price'])} | min {_value(r['minimum_nights'])} nights"
                f" | max {r['max_occupancy']} people | rules: {_value(r['house_rules'])}"
                for r in rows
            ]
            return self._rows(lines, f"No accommodation in {city}{_matching(room_type, house_rule, nights)}.")
        if kind == "restaurant":
            city, cuisine = key
            rows = sorted(self.restaurants.get((city,), []), key=lambda r: (_price(r, "cost"), _value(r["name"])))
            rows = [r for r in rows if not cuisine or _serves(r["cuisines"], cuisine)]
            lines = [f"{r['name']} | {r['cuisines']} | ${r['cost']}" for r in rows]
            return self._rows(lines, f"No restaurants in {city}{f' serving {cuisine}' if cuisine else ''}.")
        if kind == "attraction":
            lines = [_value(r["name"]) for r in self.attractions.get(key, [])]
            return self._rows(lines, f"No attractions in {key[0]}.")
        raise ValueError(kind)

    # -- the tools (names and docstrings are what the agent sees, so they are terse) --

    def SearchFlight(self, departure: str, destination: str, date: str) -> str | ToolResult:
        """Flights on a day.

        Args:
            departure: From city.
            destination: To city.
            date: YYYY-MM-DD.
        """
        origin = self._city(departure, "departure city")
        dest = self._city(destination, "destination city")
        try:
            Date.fromisoformat(date.strip())
        except ValueError:
            raise ToolError(f"bad date '{date}', use YYYY-MM-DD.") from None
        day = date.strip()
        if self.first_date and not self.first_date <= day <= self.last_date:
            raise ToolError(f"date {day} is outside {self.first_date} to {self.last_date}.")
        return self._render("flight", origin, dest, day)

    def GoogleDistanceMatrix(self, departure: str, destination: str, mode: str) -> str | ToolResult:
        """Driving time and cost.

        Args:
            departure: From city.
            destination: To city.
            mode: self-driving or taxi.
        """
        origin = self._city(departure, "departure city")
        dest = self._city(destination, "destination city")
        mode = mode.strip().lower()
        if mode in ("driving", "self driving", "selfdriving"):
            mode = "self-driving"
        if mode not in ("self-driving", "taxi"):
            raise ToolError(f"mode must be self-driving or taxi, not '{mode}'.")
        row = self.distances.get((origin, dest))
        # Legs of a day or more count as impossible, as in the official tool.
        if row is None or row["distance_km"] is None or row["duration"] is None or "day" in row["duration"]:
            return ToolResult(f"No {mode} route from {origin} to {dest}.", True, "empty")
        km = row["distance_km"]
        cost = int(km * 0.05) if mode == "self-driving" else int(km)
        return f"{mode} {origin} to {dest}: {row['duration']}, {km:g} km, ${cost}"

    def SearchAccommodation(self, city: str, room_type: str = "", house_rule: str = "", nights: str = "") -> str | ToolResult:
        """Places to stay.

        Args:
            city: City.
            room_type: Optional: entire room, private room, shared room or not shared room.
            house_rule: Optional: what guests will do (parties, smoking, children under 10, pets, visitors); hides places that forbid it.
            nights: Optional: nights of the stay; hides places whose minimum stay is longer.
        """
        room_type, house_rule = room_type.strip().lower(), house_rule.strip().lower()
        if room_type and room_type not in ROOM_TYPE_OK:
            raise ToolError(f"room_type must be one of {', '.join(ROOM_TYPE_OK)}, not '{room_type}'.")
        if house_rule and house_rule not in HOUSE_RULE_TEXT:
            raise ToolError(f"house_rule must be one of {', '.join(HOUSE_RULE_TEXT)}, not '{house_rule}'.")
        nights = nights.strip()
        if nights and not nights.isdigit():
            raise ToolError(f"nights must be a whole number, not '{nights}'.")
        return self._render("hotel", self._city(city), room_type, house_rule, nights)

    def SearchRestaurant(self, city: str, cuisine: str = "") -> str | ToolResult:
        """Restaurants.

        Args:
            city: City.
            cuisine: Optional: only places that serve it.
        """
        return self._render("restaurant", self._city(city), cuisine.strip())

    def SearchAttraction(self, city: str) -> str | ToolResult:
        """Attractions.

        Args:
            city: City.
        """
        return self._render("attraction", self._city(city))

    def SearchCity(self, state: str) -> str | ToolResult:
        """Cities of a state.

        Args:
            state: State.
        """
        cities = self.state_cities.get(state.strip())
        if cities is None:
            raise ToolError(f"unknown state '{state}'.")
        return ", ".join(cities)
