"""The 5 hard constraints, one check each.

The budget (`total_cost`), always set, and the local constraints a query may
set: house rule, cuisine, room type, transportation (`hard_set` names those
a query sets). Each check reads a plan officially or strictly;
`star.travel.evaluation.evaluate` lists how the two modes differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from star.travel.plans.plan_read import DayPlan, PlanContext, leg_ends
from star.travel.plans.plan_text import FLIGHT_NO, city_name, given, name_city, strict_mode
from star.travel.world.query import Query

HARD = ("budget", "room_rule", "cuisine", "room_type", "transportation")
# query.local_constraint key -> hard constraint
LOCAL_TO_HARD = {
    "house rule": "room_rule",
    "cuisine": "cuisine",
    "room type": "room_type",
    "transportation": "transportation",
}
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


def total_cost(c: PlanContext) -> int:
    people = c.q.people_number
    cost = 0
    for i, d in enumerate(c.days):
        if given(d.transportation):
            cost += _leg_cost(c, i, d)
        for meal in d.meals:
            if given(meal):
                r = c.item("restaurant", meal)
                cost += r.cost * people if r else 0
        if given(d.accommodation):
            h = c.item("hotel", d.accommodation)
            cost += h.price * math.ceil(people / max(h.max_occupancy, 1)) if h else 0
    return cost


def _leg_cost(c: PlanContext, i: int, d: DayPlan) -> int:
    t = d.transportation
    people = c.q.people_number
    ends = leg_ends(d)
    if ends is None:
        return 0
    if c.strict:
        mode = strict_mode(t)
        o, de = city_name(ends[0], True), city_name(ends[1], True)
        if mode == "flight":
            m = FLIGHT_NO.search(t)
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


def local_constraint(q: Query, key: str) -> Any:
    value = q.local_constraint.get(key)
    return value if value not in (None, "", []) else None


def _room_rule(c: PlanContext, rule: Any) -> bool:
    banned = HOUSE_RULE_TEXT.get(rule)
    for d in c.days:
        if given(d.accommodation):
            h = c.item("hotel", d.accommodation)
            if h is not None and banned is not None and banned in h.house_rules:
                return False
    return True


def _room_type(c: PlanContext, wanted: Any) -> bool:
    ok = ROOM_TYPE_OK.get(wanted)
    for d in c.days:
        if given(d.accommodation):
            h = c.item("hotel", d.accommodation)
            if h is not None and ok is not None and not ok(h.room_type):
                return False
    return True


def _cuisine(c: PlanContext, wanted: Any) -> bool:
    wanted = [wanted] if isinstance(wanted, str) else [str(w) for w in wanted]
    found: set[str] = set()
    for d in c.days:
        for meal in d.meals:
            if not given(meal):
                continue
            if name_city(meal, c.strict)[1] == c.q.org:
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


def _transportation(c: PlanContext, rule: Any) -> bool:
    for d in c.days:
        t = d.transportation
        if not given(t):
            continue
        if c.strict:
            mode = strict_mode(t)
            if (rule == "no flight" and mode == "flight") or (rule == "no self-driving" and mode == "self-driving"):
                return False
        elif (rule == "no flight" and "Flight" in t) or (rule == "no self-driving" and "Self-driving" in t):
            return False
    return True


LOCAL_CHECKS: dict[str, Callable[[PlanContext, Any], bool]] = {
    "house rule": _room_rule,
    "cuisine": _cuisine,
    "room type": _room_type,
    "transportation": _transportation,
}


def hard_set(query: Query) -> tuple[str, ...]:
    """The hard constraints a query sets: budget always, locals when given."""
    return ("budget",) + tuple(LOCAL_TO_HARD[k] for k in LOCAL_CHECKS if local_constraint(query, k) is not None)
