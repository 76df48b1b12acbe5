"""Turn an agent's final itinerary text into an official TravelPlanner plan.

Agents write a terse layout, one block per day:

    Day 1: from Aldmoor to Brint
    Transport: Flight F0012
    Breakfast: -
    Attractions: Old Mill; Harbor Park
    Lunch: Lotus Cafe
    Dinner: Blue Fork
    Stay: Sea Inn

Entries may carry ", City"; without it the city is the day's current city
(the destination on a travel day). This module holds the renderer
(`render_itinerary`), the `rules` formatter (a tolerant parser, no network)
and the entry point `format_itinerary`, which also dispatches to the `llm`
formatter of `star.travel.plans.format_llm`. Neither formatter raises: a failure
becomes an undelivered plan with the reason.

Every hotel, restaurant and attraction name of the public database survives
`render_itinerary` then `format_rules` unchanged (surrounding spaces aside,
which the official evaluation strips too). So that names are copied as they
are, the parser only cleans markdown around a line's key: an entry keeps
"*", "#", "|", ":" and commas. Attractions are split on ";" alone (some names
hold "|"). The renderer writes ", City" whenever the bare name could read
differently: a name with a comma (the parser splits at the last comma that
is followed by a known city), a name wrapped in "*" or "`" (a value wrapped
whole in markdown emphasis is unwrapped), and the attraction named "-". A
newline inside a name (some hotels have one) is written as a backslash
followed by "n", and read back as a newline.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Literal

from star.travel.plans.format_check import check_day
from star.travel.plans.plan import Day, Plan
from star.travel.world.query import Query

_NONE_VALUES = {"", "-", "--", "—", "–", "none", "n/a", "na", "null", "nil", "nothing"}

# Line keys the agent may use, mapped to the Day field they fill.
_KEYS = {
    "transport": "transportation",
    "transportation": "transportation",
    "travel": "transportation",
    "breakfast": "breakfast",
    "lunch": "lunch",
    "dinner": "dinner",
    "attraction": "attraction",
    "attractions": "attraction",
    "sightseeing": "attraction",
    "stay": "accommodation",
    "accommodation": "accommodation",
    "accommodations": "accommodation",
    "hotel": "accommodation",
    "lodging": "accommodation",
    "city": "current_city",
    "current city": "current_city",
}

_ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"</?[A-Za-z][^<>\n]{0,40}>")
_HEADER = re.compile(r"^day\s*(\d{1,6})\s*(?:[:\-–—.)|]+\s*(.*))?$", re.IGNORECASE)
# A field line: bullets, quotes, headings or a list number, then the key, maybe
# in markdown emphasis ("- **Stay:** ..."), then ":" / "=" / a spaced dash.
_FIELD = re.compile(
    r"^(?:\s|[-+•>#]|\*(?=\s)|\d{1,3}[.)](?=\s))*"
    r"(?P<open>[*_`]+)?(?P<key>[a-z][a-z ]{0,30}?)\s*[*_`]*\s*"
    r"(?::|=|[-–—](?=\s|$))(?(open)[*_`]*)\s*(?P<value>.*)$",
    re.IGNORECASE,
)
_ROUTE = re.compile(r"^from\s+(.+?)\s+to\s+(.+?)$", re.IGNORECASE)
_ARROW = re.compile(r"^(.+?)\s*(?:->|→|=>)\s*(.+?)$")
_ROUTE_IN = re.compile(r"\bfrom\s+(.+?)\s+to\s+([^,;]+)", re.IGNORECASE)
_FLIGHT = re.compile(r"flight(?:\s*(?:number|no\.?|#))?\s*[:#]?\s*([A-Za-z0-9]+)", re.IGNORECASE)


# Keys whose value names a place: kept as written, markdown and all.
_ENTRY_KEYS = {"breakfast", "lunch", "dinner", "attraction", "accommodation"}
_EMPHASIS = ("***", "**", "*", "__", "`")


def _unwrap(value: str) -> str:
    """'**Sea Inn**' -> 'Sea Inn': markdown emphasis around a whole value."""
    for mark in _EMPHASIS:
        if len(value) > 2 * len(mark) and value.startswith(mark) and value.endswith(mark):
            return value[len(mark) : -len(mark)].strip()
    return value


# ---------------------------------------------------------------- rendering


def _split_entry(entry: str) -> tuple[str, str | None]:
    """Split an official "Name, City" entry at its last comma."""
    name, sep, city = entry.rpartition(",")
    if not sep:
        return entry.strip(), None
    return name.strip(), city.strip()


def _route(current_city: str) -> tuple[str, str] | None:
    match = _ROUTE.match(current_city.strip())
    return (match.group(1).strip(), match.group(2).strip()) if match else None


def _default_city(current_city: str) -> str | None:
    route = _route(current_city)
    if route:
        return route[1]
    city = current_city.strip()
    return None if city in ("", "-") else city


def _needs_city(name: str) -> bool:
    """Whether a bare `name` would be read back as another name (see the module doc)."""
    return "," in name or _unwrap(name) != name or _is_none(name)


def _render_entry(entry: str, default: str | None) -> str:
    name, city = _split_entry(entry)
    if city is None:
        text = entry.strip()
    elif city == default and not _needs_city(name):
        text = name
    else:
        text = f"{name}, {city}"
    # The layout is one line per field; no database name holds a backslash.
    return text.replace("\n", "\\n")


def _transport_mode(value: str) -> str | None:
    """The terse mode ("Flight F1", "Self-driving", "Taxi") or None if unknown."""
    low = value.lower()
    if "flight" in low:
        number = _flight_number(value)
        return f"Flight {number}" if number else None
    if "self-driving" in low or "self driving" in low or "drive" in low or "driving" in low:
        return "Self-driving"
    if "taxi" in low or re.search(r"\bcab\b", low):
        return "Taxi"
    return None


def _flight_number(value: str) -> str | None:
    for match in _FLIGHT.finditer(value):
        token = match.group(1)
        if token.lower() not in ("from", "to", "number", "no"):
            return token
    return None


def _render_transport(value: str, day_route: tuple[str, str] | None) -> str:
    value = value.strip()
    if value.lower() in _NONE_VALUES:
        return "-"
    mode = _transport_mode(value)
    if mode is None:
        return value
    match = _ROUTE_IN.search(value)
    route = (match.group(1).strip(), match.group(2).strip()) if match else None
    # The route is implied by the day header; spell it out only when it differs.
    if route is None or route == day_route:
        return mode
    return f"{mode}, from {route[0]} to {route[1]}"


def render_itinerary(plan: Plan, skip_empty: bool = False) -> str:
    """Write a plan in the terse layout agents produce (the parser's inverse).

    `skip_empty` leaves out "-" fields (the parser reads a missing field as "-"),
    which keeps trajectories short.
    """
    lines: list[str] = []
    for day in plan.days:
        default = _default_city(day.current_city)
        attractions = [a for a in day.attraction.split(";") if a.strip() and a.strip() != "-"]
        lines.append(f"Day {day.days}: {day.current_city.strip() or '-'}")
        fields = [
            ("Transport", _render_transport(day.transportation, _route(day.current_city))),
            ("Breakfast", _render_entry(day.breakfast, default)),
            ("Attractions", "; ".join(_render_entry(a, default) for a in attractions) or "-"),
            ("Lunch", _render_entry(day.lunch, default)),
            ("Dinner", _render_entry(day.dinner, default)),
            ("Stay", _render_entry(day.accommodation, default)),
        ]
        lines += [f"{key}: {value}" for key, value in fields if not (skip_empty and value == "-")]
    return "\n".join(lines)


# ------------------------------------------------------------ rules parser


def _clean_markdown(text: str) -> str:
    return text.replace("*", "").replace("__", "").replace("`", "")


def _clean_line(line: str) -> str:
    """A line without markdown, to spot a day header (entries are read from the raw line)."""
    line = _clean_markdown(_TAG.sub("", line))
    # Markdown bullets, quotes, headings and list numbers before the key.
    line = re.sub(r"^[\s\-+•>#]+", "", line)
    line = re.sub(r"^\d{1,3}[.)]\s+", "", line)
    return line.strip()


def _answer_text(text: str) -> str:
    """Prefer the last <answer> block; a draft before it is not the answer."""
    blocks = _ANSWER.findall(text)
    return blocks[-1] if blocks else text


def _parse_blocks(text: str) -> dict[int, dict[str, str]]:
    blocks: dict[int, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for raw in _answer_text(text).splitlines():
        raw = _TAG.sub("", raw)
        line = _clean_line(raw)
        if not line:
            continue
        header = _HEADER.match(line)
        if header:
            # A repeated day number replaces the earlier block (a revision).
            current = {"header": (header.group(2) or "").strip()}
            blocks[int(header.group(1))] = current
            continue
        field = _FIELD.match(raw)
        if current is None or not field:
            continue
        key = _KEYS.get(" ".join(field["key"].lower().split()))
        if key and key not in current:
            value = field["value"].strip()
            # Names keep their characters; cities and transport lose markdown.
            current[key] = value if key in _ENTRY_KEYS else _clean_markdown(value).strip()
    return blocks


def _is_none(value: str) -> bool:
    return value.strip().strip(".").strip().lower() in _NONE_VALUES


def _city_route(value: str) -> tuple[str, str] | str | None:
    """A header city: a (from, to) route, one city, or None."""
    value = value.strip().rstrip(".").strip()
    if _is_none(value):
        return None
    match = _ROUTE.match(value) or _ARROW.match(value)
    if match:
        return match.group(1).strip(), match.group(2).strip()
    return value


def _one_case(text: str) -> bool:
    return text in (text.lower(), text.upper())


class _Cities:
    """Known city spellings, so "brint" becomes "Brint" and a ", City" suffix is recognised."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._fixed: set[str] = set()

    @staticmethod
    def _key(city: str) -> str:
        return " ".join(city.lower().split()).rstrip(".")

    def add(self, city: str, fixed: bool = False) -> None:
        key, city = self._key(city), city.strip()
        if not key:
            return
        if fixed:
            self._fixed.add(key)
        old = self._names.get(key)
        # Keep the first spelling, unless it was all one case and this one is not
        # ("brint" then "Brint"); the query's spelling is never replaced.
        if old is None or fixed or (key not in self._fixed and _one_case(old) and not _one_case(city)):
            self._names[key] = city

    def get(self, city: str) -> str | None:
        return self._names.get(self._key(city))

    def canonical(self, city: str) -> str:
        return self.get(city) or city.strip()


def _entry(value: str, default: str | None, cities: _Cities, dash_name: bool = False) -> str:
    """'Name[, City]' -> 'Name, City'; "-" for nothing.

    With `dash_name`, "-, City" names a place called "-" (Juneau has such an
    attraction); a bare "-" is still nothing.
    """
    value = _unwrap(value.strip()).replace("\\n", "\n")
    if _is_none(value):
        return "-"
    name, sep, suffix = value.rpartition(",")
    city = cities.get(suffix) if sep else None
    if city is None:
        # No known city after the last comma: it belongs to the name.
        name, city = value, default
    name = name.strip()
    if not name or (_is_none(name) and not (dash_name and name == "-" and sep)):
        return "-"
    return f"{name}, {city}" if city else name


def _transport(value: str, route: tuple[str, str] | None, cities: _Cities) -> str:
    if _is_none(value):
        return "-"
    match = _ROUTE_IN.search(value)
    if match:
        route = (cities.canonical(match.group(1)), cities.canonical(match.group(2)))
    mode = _transport_mode(value)
    if mode is None:
        # An unknown mode is kept as written so evaluation can judge it.
        return value if match or route is None else f"{value}, from {route[0]} to {route[1]}"
    if mode.startswith("Flight "):
        mode = "Flight Number: " + mode.removeprefix("Flight ")
    return f"{mode}, from {route[0]} to {route[1]}" if route else mode


def _day(number: int, block: dict[str, str], cities: _Cities) -> Day:
    place = _city_route(block.get("header") or block.get("current_city", ""))
    route: tuple[str, str] | None = None
    if isinstance(place, tuple):
        route = (cities.canonical(place[0]), cities.canonical(place[1]))
        current, default = f"from {route[0]} to {route[1]}", route[1]
    elif isinstance(place, str):
        current = default = cities.canonical(place)
    else:
        current, default = "-", None
    # Only ";" separates attractions: "|" occurs in real names.
    attractions = [
        _entry(a, default, cities, dash_name=True) for a in block.get("attraction", "").split(";") if not _is_none(a)
    ]
    attractions = [a for a in attractions if a != "-"]
    return Day(
        days=number,
        current_city=current,
        transportation=_transport(block.get("transportation", "-"), route, cities),
        breakfast=_entry(block.get("breakfast", "-"), default, cities),
        attraction="".join(f"{a};" for a in attractions) or "-",
        lunch=_entry(block.get("lunch", "-"), default, cities),
        dinner=_entry(block.get("dinner", "-"), default, cities),
        accommodation=_entry(block.get("accommodation", "-"), default, cities),
    )


def _format_rules(text: str, query: Query | None, idx: int) -> Plan:
    plan = Plan(idx=idx, query=query.query if query else "")
    blocks = _parse_blocks(text)
    if query is not None:
        blocks = {n: b for n, b in blocks.items() if 1 <= n <= query.days}
    if not blocks:
        plan.error = "no day found in the itinerary"
        return plan
    cities = _Cities()
    if query is not None:
        cities.add(query.org, fixed=True)
        cities.add(query.dest, fixed=True)
    for block in blocks.values():
        place = _city_route(block.get("header") or block.get("current_city", ""))
        for city in place if isinstance(place, tuple) else [place] if place else []:
            cities.add(city)
        # A transport may name a city no header does (an excursion).
        route = _ROUTE_IN.search(block.get("transportation", ""))
        for city in route.groups() if route else []:
            cities.add(city)
    if query is None:
        numbers = sorted(blocks)
    else:
        # Missing days become "-" days, so evaluation fails completeness instead of crashing.
        numbers = list(range(1, query.days + 1))
    plan.days = [_day(n, blocks[n], cities) if n in blocks else Day(days=n) for n in numbers]
    return plan


def format_rules(text: str, query: Query | None = None, idx: int = 0) -> Plan:
    """Parse the terse itinerary layout into an official plan; never raises."""
    if query is not None and not idx:
        idx = query.idx
    try:
        return official_layout(_format_rules(str(text), query, idx))
    except Exception as exc:  # the parser must never take the pipeline down
        return Plan(idx=idx, query=query.query if query else "", error=f"rules formatter failed: {exc!r}")


def official_layout(plan: Plan) -> Plan:
    """The plan, or an undelivered one when a day breaks the official format rules.

    The leaderboard's reader crashes on such a day (for example a current city
    "from A" with no destination, or a flight with no route), so a garbled
    itinerary is not delivered rather than written as a file it would reject.
    """
    problems = [p for n, day in enumerate(plan.days, start=1) for p in check_day(asdict(day), n)] if plan.error is None else []
    if problems:
        return Plan(idx=plan.idx, query=plan.query, error=f"breaks the official format: {problems[0]}")
    return plan


# ------------------------------------------------------------- entry point


def format_itinerary(
    text: str,
    query: Query | None = None,
    kind: Literal["rules", "llm"] = "rules",
    *,
    idx: int = 0,
    **llm_options: Any,
) -> Plan:
    """Format an itinerary with the chosen formatter (llm options: base_url, model, ...)."""
    if kind == "rules":
        return format_rules(text, query, idx)
    if kind == "llm":
        # Imported here: the rules formatter (GRPO's rewards, the expert) then never loads the LLM client.
        from star.travel.plans.format_llm import format_llm

        return official_layout(format_llm(text, query, idx=idx, **llm_options))
    raise ValueError(f"unknown formatter {kind!r}; expected 'rules' or 'llm'")
