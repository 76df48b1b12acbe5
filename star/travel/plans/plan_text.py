"""Plan text as the official TravelPlanner scripts cut it.

"from A to B", "Name, City", "City(State)", ";"-separated attractions, a
leg's transport mode. Where the two evaluation modes of
`star.travel.evaluation.evaluate` read text differently, a helper takes `strict`.
"""

from __future__ import annotations

import re
from functools import lru_cache

# These patterns reproduce how the official scripts cut plan text.
FROM_TO = re.compile(r"from\s+(?P<a>.+?)\s+to\s+(?P<b>[^,]+)(?=[,\s]|$)")
BEFORE_PAREN = re.compile(r"^(?P<head>.*?)\([^)]*\)")
NAME_CITY = re.compile(r"(?P<name>.*?),\s*(?P<city>[^,]+)(\(\w[\w\s]*\))?$")
# Strict: the name is everything before the last comma, newlines included
# (officially "." stops at a newline, so only the name's last line is read).
NAME_CITY_DOTALL = re.compile(NAME_CITY.pattern, re.DOTALL)
FLIGHT_NO = re.compile(r"flight number:\s*(?P<no>[^,\s]+)", re.IGNORECASE)


@lru_cache(maxsize=1 << 16)
def from_to(text: str) -> tuple[str, str] | None:
    m = FROM_TO.search(text)
    return (m["a"], m["b"]) if m else None


@lru_cache(maxsize=1 << 16)
def before_paren(text: str) -> str:
    m = BEFORE_PAREN.search(text)
    return m["head"] if m else text


@lru_cache(maxsize=1 << 16)
def name_city(text: str, strict: bool = False) -> tuple[str, str]:
    """'Name, City' -> (name, city); ('-', '-') when there is no comma."""
    last = text.rfind(",")
    if last < 0:
        return "-", "-"
    # The city is everything after the last comma, and the name cannot start before the
    # line holding it ("." stops at a newline unless strict). One match from there gives
    # what the search gives, in linear time; the search would try every start.
    start = 0 if strict else text.rfind("\n", 0, last) + 1
    m = (NAME_CITY_DOTALL if strict else NAME_CITY).match(text, start)
    if not m:
        return "-", "-"
    return m["name"].strip(), before_paren(m["city"].strip()).strip()


def given(value: str) -> bool:
    return bool(value) and value != "-"


def blank(value: str) -> bool:
    return value in ("", "-")


def city_name(text: str, strict: bool) -> str:
    cut = before_paren(text)
    return cut.strip() if strict else cut


def day_cities(current_city: str, strict: bool) -> list[str] | None:
    """[from, to] on a travel day, [city] otherwise; None when unreadable."""
    if "from" in current_city:
        pair = from_to(current_city)
        if pair is None:
            return None  # the official scripts raise here
        return [city_name(pair[0], strict), city_name(pair[1], strict)]
    return [city_name(current_city, strict)]


def pieces(attraction: str, strict: bool) -> list[str]:
    parts = attraction.split(";")
    if strict:
        return [p.strip() for p in parts if p.strip()]
    return parts[:-1]  # official: the last piece is dropped


def item_key(text: str) -> tuple[str, str]:
    """Identity of an item for the strict repeat checks."""
    name, city = name_city(text, True)
    return (name, city) if (name, city) != ("-", "-") else (text.strip(), "")


def official_mode(text: str) -> str | None:
    """The official conflict check's reading of a leg."""
    low = text.lower()
    if "taxi" in low:
        return "taxi"
    if "self-driving" in low:
        return "self-driving"
    if "flight" in low:
        return "flight"
    return None


def strict_mode(text: str) -> str | None:
    low = text.lower()
    for mode in ("flight", "self-driving", "taxi"):
        if mode in low:
            return mode
    return None
