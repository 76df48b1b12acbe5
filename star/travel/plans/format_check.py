"""The rules a submission JSONL must follow before the TravelPlanner leaderboard takes it.

The official check (`postprocess/format_check.py`) reads the file one JSON
object per line and runs the official commonsense evaluation (then the hard
one) on each row's plan against a fixed 7-day placeholder query, so the
first seven days of a plan are read. Nothing is printed: a file passes when
nothing raises. The leaderboard page and `example_submission.jsonl` give the
layout. What makes the official code raise, or breaks the documented layout,
is written down here as rules:

File
* Each line is one JSON object; no blank line between rows (the official
  reader splits the stripped text on newlines and parses every piece).
* Given the queries: one row per query, in their order. The official
  evaluation pairs the k-th row with the k-th query (180 for validation,
  1,000 for test); `idx` is only checked here, to catch a reordering.

Row
* Keys `idx` (an integer), `query` (a string) and `plan`.
* `plan` is empty (null, `[]` or `""`: no plan delivered, which is allowed)
  or a list of day objects (a string or an object there raises).

Day (every day is checked, not only the first seven)
* The keys current_city and transportation (the official check raises
  without them), and the day's number under `days` (or `day`, which the
  official example also uses) equal to its position, 1, 2, ... The keys
  breakfast, attraction, lunch, dinner and accommodation may be left out, as
  one day of the official example does: the plan is then incomplete, which
  the evaluation reports without raising.
* current_city and accommodation are strings (a null one raises); the other
  fields are strings or null (a null is read as nothing). "-" means nothing.
* current_city is not empty (with a hotel on that day, an empty city raises).
* A current_city that contains "from" reads "from A to B" (otherwise the
  official route reader returns nothing and the next step raises).
* A flight (transportation mentioning "flight number" in any case) spells
  "Flight Number: " before the number, and its route "from A to B" is in
  the transportation or, failing that, in the day's current_city.

Everything else (a name missing from the database, a wrong city, a day
count that differs from the query's) is the evaluator's business, not a
format violation. Command line:

    python -m star.travel.plans.format_check --plans FILE [--queries FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from star.travel.world.query import Query, read_queries

DAY_KEYS = ("current_city", "transportation", "breakfast", "attraction", "lunch", "dinner", "accommodation")
# Keys the official code reads without asking whether they are there.
REQUIRED = ("current_city", "transportation")
# Fields whose null makes the official code raise.
NOT_NULL = ("current_city", "accommodation")
# The official route reader: "from A to B", B ending at a comma or the end.
_ROUTE = re.compile(r"from\s+(.+?)\s+to\s+([^,]+)(?=[,\s]|$)")
FLIGHT_PREFIX = "Flight Number: "


class SubmissionFormatError(Exception):
    """A submission the project wrote breaks the official format rules: a bug, explained in one line."""

    def __init__(self, path: str | Path, violations: Sequence[str]):
        self.violations = list(violations)
        n = len(self.violations)
        more = f" (and {n - 1} more)" if n > 1 else ""
        super().__init__(
            f"{path}: the formatter wrote a submission with {n} violation{'s' if n > 1 else ''} of the official"
            f" format rules, a formatter bug; first: {self.violations[0]}{more}"
        )


def _show(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_day(day: Any, position: int) -> list[str]:
    """What is wrong with one day object, the `position`-th of its plan (1-based)."""
    where = f"day {position}"
    if not isinstance(day, dict):
        return [f"{where} is not an object but {_show(day)}"]
    out = []
    missing = [k for k in REQUIRED if k not in day]
    if missing:
        out.append(f"{where} lacks {', '.join(missing)}")
    number_key = "days" if "days" in day else "day" if "day" in day else None
    if number_key is None:
        out.append(f"{where} has no day number (days)")
    elif not _is_int(day[number_key]) or day[number_key] != position:
        out.append(f"{where} is numbered {_show(day[number_key])}, not {position}")
    for key in DAY_KEYS:
        if key not in day:
            continue
        value = day[key]
        if value is None and key in NOT_NULL:
            out.append(f"{where}: {key} is null")
        elif value is not None and not isinstance(value, str):
            out.append(f"{where}: {key} is not a string but {_show(value)}")
    city, transport = day.get("current_city"), day.get("transportation")
    if isinstance(city, str):
        if not city.strip():
            out.append(f"{where}: current_city is empty")
        elif "from" in city and not _ROUTE.search(city):
            out.append(f"{where}: current_city {_show(city)} says 'from' but is not 'from A to B'")
    if isinstance(transport, str) and "flight number" in transport.lower():
        if FLIGHT_PREFIX not in transport:
            out.append(f"{where}: flight {_show(transport)} does not spell {FLIGHT_PREFIX.strip()!r} before the number")
        if not _ROUTE.search(transport) and not (isinstance(city, str) and _ROUTE.search(city)):
            out.append(f"{where}: flight {_show(transport)} has no route 'from A to B', nor has the day's current_city")
    return out


def check_row(row: Any) -> list[str]:
    """What is wrong with one submission row (a parsed JSON line)."""
    if not isinstance(row, dict):
        return [f"is not a JSON object but {_show(row)}"]
    out = []
    missing = [k for k in ("idx", "query", "plan") if k not in row]
    if missing:
        out.append(f"lacks {', '.join(missing)}")
    if "idx" in row and not _is_int(row["idx"]):
        out.append(f"idx is not an integer but {_show(row['idx'])}")
    if "query" in row and not isinstance(row["query"], str):
        out.append(f"query is not a string but {_show(row['query'])}")
    plan = row.get("plan")
    if not plan:  # null, [] or "": no plan delivered
        return out
    if not isinstance(plan, list):
        return [*out, f"plan is neither empty nor a list of days but {_show(plan)}"]
    for position, day in enumerate(plan, start=1):
        out += check_day(day, position)
    return out


def check_rows(rows: Sequence[Any], queries: Sequence[Query] | None = None) -> list[str]:
    """Every violation in parsed submission rows, as lines such as "line 3: day 2 lacks transportation".

    Given `queries`, the rows must answer them one for one, in order.
    """
    out = []
    for n, row in enumerate(rows, start=1):
        if row is not _UNREADABLE:
            out += [f"line {n}: {problem}" for problem in check_row(row)]
    if queries is not None:
        if len(rows) != len(queries):
            out.append(f"{len(rows)} rows for {len(queries)} queries: one row per query is needed")
        for n, (row, query) in enumerate(zip(rows, queries), start=1):
            idx = row.get("idx") if isinstance(row, dict) else None
            if _is_int(idx) and idx != query.idx:
                out.append(f"line {n}: idx {idx}, but query {n} has idx {query.idx} (rows must follow the queries' order)")
    return out


# Stands for a line that is not JSON (already reported), so later lines keep their numbers.
_UNREADABLE = object()


def check_text(text: str, queries: Sequence[Query] | None = None) -> list[str]:
    """Every violation in the text of a submission file: unreadable lines, then `check_rows`."""
    # As the official reader: whitespace around the whole text is ignored, then every
    # newline separates two rows, so a blank line in between is a row that is not JSON.
    body = text.strip()
    if not body:
        return [] if queries is not None and not queries else ["the file has no rows"]
    out = []
    rows: list[Any] = []
    for n, line in enumerate(body.split("\n"), start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            out.append(f"line {n} is blank" if not line.strip() else f"line {n} is not JSON: {exc.msg}")
            rows.append(_UNREADABLE)
    return out + check_rows(rows, queries)


def check_file(path: str | Path, queries: Sequence[Query] | None = None) -> list[str]:
    """Every violation in a submission JSONL file (read as the official reader does: UTF-8, any newline)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as exc:
        return [f"the file is not UTF-8: {exc.reason} at byte {exc.start}"]
    return check_text(text, queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check a TravelPlanner submission JSONL against the official format rules.")
    parser.add_argument("--plans", required=True, help="the submission JSONL")
    parser.add_argument("--queries", help="the queries it answers, one JSON object per line (optional)")
    args = parser.parse_args(argv)
    violations = check_file(args.plans, read_queries(args.queries) if args.queries else None)
    for violation in violations:
        print(violation)
    print(f"{len(violations)} violations", file=sys.stderr)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
