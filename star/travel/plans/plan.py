"""The TravelPlanner plan format and the official submission JSONL.

A plan is a list of days; every entry is "Name, City" or "-". Reading is
tolerant: anything malformed becomes an undelivered plan with a reason,
never an exception. A JSON null in a day's field is kept as None (not "-"):
the official evaluation treats a null differently from "-" (see
`parse_days`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from star.io import write_jsonl

DAY_FIELDS = (
    "days",
    "current_city",
    "transportation",
    "breakfast",
    "attraction",
    "lunch",
    "dinner",
    "accommodation",
)


@dataclass
class Day:
    """One day of a plan. Plans built here hold strings; one read from a
    submission holds None where the JSON has null."""

    days: int
    current_city: str = "-"
    transportation: str = "-"
    breakfast: str = "-"
    attraction: str = "-"
    lunch: str = "-"
    dinner: str = "-"
    accommodation: str = "-"


@dataclass
class Plan:
    """One query's plan. `delivered` is False when there is no usable plan."""

    idx: int
    query: str = ""
    days: list[Day] = field(default_factory=list)
    error: str | None = None

    @property
    def delivered(self) -> bool:
        return bool(self.days) and self.error is None

    def to_submission(self) -> dict[str, Any]:
        return {"idx": self.idx, "query": self.query, "plan": [asdict(d) for d in self.days]}


def parse_days(raw: Any) -> tuple[list[Day], str | None]:
    """Turn a JSON plan (list of day dicts) into Days, or ([], reason).

    A missing key reads as "-". A null value stays None, because the
    official evaluation does not read it as "-": its checks skip a null like
    "-", but its completeness check only counts "" and "-" as missing, so a
    null meal, attraction, transport or hotel passes it (without counting as
    filled), and a null hotel or current city crashes the official script.
    `star.travel.evaluation.evaluate` reproduces that in official mode (the check that
    would crash fails) and reads a null as "-" in strict mode. Any other
    value becomes its str().
    """
    if raw is None or raw == "" or raw == []:
        return [], "empty plan"
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            return [], f"plan is not JSON: {exc.msg}"
    if not isinstance(raw, list):
        return [], f"plan must be a list of days, got {type(raw).__name__}"
    days: list[Day] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            return [], f"day {i + 1} is not an object"
        number = item.get("days", item.get("day", i + 1))
        try:
            number = int(number)
        except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity, 1e999
            return [], f"day {i + 1} has a non-integer day number {number!r}"
        values = {}
        for key in DAY_FIELDS[1:]:
            value = item.get(key, "-")
            values[key] = None if value is None else str(value)
        days.append(Day(days=number, **values))
    return days, None


def plan_from_submission(row: Any, fallback_idx: int = 0) -> Plan:
    if not isinstance(row, dict):
        return Plan(idx=fallback_idx, error="submission row is not an object")
    try:
        idx = int(row.get("idx", fallback_idx))
    except (TypeError, ValueError, OverflowError):
        idx = fallback_idx
    days, error = parse_days(row.get("plan"))
    return Plan(idx=idx, query=str(row.get("query", "")), days=days, error=error)


def read_submission(path: str | Path) -> list[Plan]:
    """Read a submission JSONL; a garbled line becomes an undelivered plan."""
    plans = []
    with open(path) as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                plans.append(Plan(idx=n, error=f"line {n} is not JSON: {exc.msg}"))
                continue
            plans.append(plan_from_submission(row, fallback_idx=n))
    return plans


def write_submission(path: str | Path, plans: list[Plan]) -> None:
    write_jsonl(path, (p.to_submission() for p in plans))
