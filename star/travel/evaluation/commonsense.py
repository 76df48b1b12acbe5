"""The 8 commonsense constraints, one check each.

Each check reads a plan officially or strictly; `star.travel.evaluation.evaluate` lists
how the two modes differ.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from star.travel.plans.plan_read import DayPlan, PlanContext, leg_ends
from star.travel.plans.plan_text import (
    FLIGHT_NO,
    before_paren,
    blank,
    city_name,
    day_cities,
    given,
    item_key,
    name_city,
    official_mode,
    pieces,
    strict_mode,
)

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
PLACEHOLDER_CITY = "You don't need to fill in the information for this or later days."


def _within_sandbox(c: PlanContext) -> bool:
    for i, d in enumerate(c.days):
        t = d.transportation
        if given(t) and not _leg_exists(c, i, d):
            return False
        for meal in d.meals:
            if given(meal) and c.item("restaurant", meal) is None:
                return False
        if given(d.attraction):
            for piece in pieces(d.attraction, c.strict):
                if c.item("attraction", piece) is None:
                    return False
        if given(d.accommodation) and c.item("hotel", d.accommodation) is None:
            return False
    return True


def _leg_exists(c: PlanContext, i: int, d: DayPlan) -> bool:
    t = d.transportation
    ends = leg_ends(d)
    if c.strict:
        mode = strict_mode(t)
        if mode is None or ends is None:
            return False
        o, de = city_name(ends[0], True), city_name(ends[1], True)
        if mode == "flight":
            m = FLIGHT_NO.search(t)
            date = c.q.date[i] if i < len(c.q.date) else None
            return m is not None and c.ix.dated_flight_price(m["no"], o, de, date) is not None
        return c.ix.drive_cost(o, de, mode) is not None
    low = t.lower()
    if "flight number" in low:
        parts = t.split("Flight Number: ")
        if ends is None or len(parts) < 2:
            return False  # the official scripts raise here
        return c.ix.flight_exists(parts[1].split(",")[0], before_paren(ends[0]), before_paren(ends[1]))
    if "self-driving" in low or "taxi" in low:
        o, de = (ends[0], ends[1]) if ends else ("-", "-")
        return c.ix.drive_cost(o, de, "self-driving" if "self-driving" in low else "taxi") is not None
    return True  # official: other kinds of legs are not looked up


def _complete_information(c: PlanContext) -> bool:
    q, days = c.q, c.days
    if len(days) < q.days or any(d.current_city == PLACEHOLDER_CITY for d in days):
        return False
    visited: set[str] = set()
    for i, d in enumerate(days):
        cities = day_cities(d.current_city, c.strict)
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
        if (leaving or "to " in cc) and blank(d.transportation):
            return False
        if not leaving and " to " not in cc and blank(d.attraction):
            return False
        if i != q.days - 1 and blank(d.accommodation):
            return False
        if not leaving and any(blank(m) for m in d.meals):
            return False
        filled += bool(d.number) + sum(
            given(v)
            for v in (cc, d.transportation, d.breakfast, d.attraction, d.lunch, d.dinner, d.accommodation)
        )
    return filled / (6 * q.days) >= 0.5


def _within_current_city(c: PlanContext) -> bool:
    for d in c.days:
        cities = day_cities(d.current_city, c.strict)
        if cities is None:
            return False
        t = d.transportation
        if c.strict:
            if given(t) and not all(city in t for city in cities):
                return False
            items = [m for m in d.meals if given(m)]
            if given(d.attraction):
                items += pieces(d.attraction, True)
            if any(name_city(x, True)[1] not in cities for x in items):
                return False
            if given(d.accommodation) and name_city(d.accommodation, True)[1] != cities[-1]:
                return False
            continue
        # Official: on a day without travel the "cities" are the letters of the name.
        places: Sequence[str] = cities if len(cities) == 2 else cities[0]
        if given(t) and any(p not in t for p in places):
            return False
        items = [m for m in d.meals if given(m)]
        if given(d.attraction):
            items += pieces(d.attraction, False)
        if any(not any(p in x for p in places) for x in items):
            return False
        if given(d.accommodation) and (not places or places[-1] not in d.accommodation):
            return False
    return True


def valid_sequence(cities: list[str]) -> bool:
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


def _reasonable_city_route(c: PlanContext) -> bool:
    q = c.q
    route: list[str] = []
    for i, d in enumerate(c.days):
        cities = day_cities(d.current_city, c.strict)
        if cities is None:
            return False
        if i == 0:
            leaves_origin = len(cities) == 2 and cities[0] == q.org
            # Official: only a travel day 1 is checked; strict: day 1 must leave the origin.
            if not leaves_origin and (c.strict or len(cities) == 2):
                return False
        route += cities
    if not route or route[0] != route[-1] or not valid_sequence(route):
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


def _diverse_restaurants(c: PlanContext) -> bool:
    seen: set[Any] = set()
    for d in c.days:
        for meal in d.meals:
            if given(meal):
                key = item_key(meal) if c.strict else meal
                if key in seen:
                    return False
                seen.add(key)
    return True


def _diverse_attractions(c: PlanContext) -> bool:
    seen: set[Any] = set()
    for d in c.days:
        if given(d.attraction):
            for piece in pieces(d.attraction, c.strict):
                key = item_key(piece) if c.strict else piece
                if key in seen:
                    return False
                seen.add(key)
    return True


def _non_conflicting_transportation(c: PlanContext) -> bool:
    if not given(c.days[0].transportation):
        return False  # official: day 1 must have a leg
    read = strict_mode if c.strict else official_mode
    modes = {read(d.transportation) for d in c.days if given(d.transportation)}
    return not ("self-driving" in modes and ("flight" in modes or "taxi" in modes))


def _minimum_nights_stay(c: PlanContext) -> bool:
    stays: list[list[Any]] = []  # [key, nights, text]
    for d in c.days:
        a = d.accommodation
        key = item_key(a) if c.strict and given(a) else a
        if stays and stays[-1][0] == key:
            stays[-1][1] += 1
        else:
            stays.append([key, 1, a])
    for _, nights, text in stays:
        if blank(text):
            continue
        if c.strict:
            hotel = c.item("hotel", text)
        else:
            hits = c.ix.matches("hotel", *name_city(text))
            hotel = hits[0] if len(hits) == 1 else None  # official: only a unique match is checked
        if hotel is not None and hotel.minimum_nights is not None and nights < hotel.minimum_nights:
            return False
    return True


COMMONSENSE_CHECKS: dict[str, Callable[[PlanContext], bool]] = {
    "within_sandbox": _within_sandbox,
    "complete_information": _complete_information,
    "within_current_city": _within_current_city,
    "reasonable_city_route": _reasonable_city_route,
    "diverse_restaurants": _diverse_restaurants,
    "diverse_attractions": _diverse_attractions,
    "non_conflicting_transportation": _non_conflicting_transportation,
    "minimum_nights_stay": _minimum_nights_stay,
}
