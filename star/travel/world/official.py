"""The published TravelPlanner query files (validation, test) as this project's queries.

The hub distributes each split as CSV (and parquet) with the columns org,
dest, days, visiting_city_number, date, people_number, local_constraint,
budget, query and level, and sometimes reference_information and
annotated_plan, which are ignored. `date` and `local_constraint` are Python
literals in strings ("['2022-03-16', ...]", "{'house rule': None, ...}"):
they are read with `ast.literal_eval`, never evaluated as code. A query's idx
is its row number, 1, 2, ..., as in the official submission example, so the
k-th row of a submission answers the k-th query.

Anything wrong with the file (missing, unreadable, a column or a value that
does not fit) is an `OfficialQueriesError` whose message is one line naming
the file, the row and the field.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from star.travel.specs import LEVELS
from star.travel.world.query import LOCAL_KEYS, Query

COLUMNS = ("org", "dest", "days", "visiting_city_number", "date", "people_number", "local_constraint", "budget", "query", "level")


class OfficialQueriesError(ValueError):
    """A published query file that cannot be used, explained in one line."""


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _literal(value: Any, kind: type, field: str) -> Any:
    """A Python literal written in a string (or already parsed, as parquet may give it)."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise ValueError(f"{field} is not a Python {kind.__name__} literal: {_short(value)}") from None
    if not isinstance(value, kind):
        raise ValueError(f"{field} is not a {kind.__name__}: {_short(value)}")
    return value


def _integer(value: Any, field: str) -> int:
    number = value
    if isinstance(number, str):
        try:
            number = float(number.strip()) if number.strip() else None
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number) or number != int(number):
        raise ValueError(f"{field} is not a whole number: {_short(value)}")
    return int(number)


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field} is empty" if value in (None, "") else f"{field} is not text: {_short(value)}")
    return value.strip()


def _local(value: Any) -> dict[str, Any]:
    local = _literal(value, dict, "local_constraint")
    unknown = sorted(str(k) for k in local if k not in LOCAL_KEYS)
    if unknown:
        raise ValueError(f"local_constraint has unknown keys {unknown} (known: {', '.join(LOCAL_KEYS)})")
    for key, item in local.items():
        ok = item is None or (
            isinstance(item, list) and all(isinstance(c, str) for c in item) if key == "cuisine" else isinstance(item, str)
        )
        if not ok:
            raise ValueError(f"local_constraint[{key!r}] is {_short(item)}")
    return local


def _dates(value: Any, days: int) -> list[str]:
    dates = list(value if isinstance(value, (list, tuple)) else _literal(value, list, "date"))
    for day in dates:
        try:
            date.fromisoformat(day)
        except (TypeError, ValueError):
            raise ValueError(f"date holds {_short(day)}, not a YYYY-MM-DD date") from None
    if len(dates) != days:
        raise ValueError(f"date lists {len(dates)} dates for {days} days")
    return dates


def query_from_row(row: dict[str, Any], idx: int) -> Query:
    """One published row as a Query; ValueError (one line) when a field does not fit."""
    days = _integer(row["days"], "days")
    level = _text(row["level"], "level").lower()
    if level not in LEVELS:
        raise ValueError(f"level is {_short(row['level'])}, not one of {', '.join(LEVELS)}")
    fields = {
        "idx": idx,
        "org": _text(row["org"], "org"),
        "dest": _text(row["dest"], "dest"),
        "days": days,
        "visiting_city_number": _integer(row["visiting_city_number"], "visiting_city_number"),
        "date": _dates(row["date"], days),
        "people_number": _integer(row["people_number"], "people_number"),
        "local_constraint": _local(row["local_constraint"]),
        "budget": _integer(row["budget"], "budget"),
        "query": _text(row["query"], "query"),
        "level": level,
    }
    try:
        return Query.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{'.'.join(map(str, err['loc']))} = {_short(err.get('input'))}: {err['msg']}") from None


def _rows(path: Path) -> list[dict[str, Any]]:
    import polars as pl

    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            # Every cell as text: the fields are parsed here, the same way for both formats.
            frame = pl.read_csv(path, infer_schema_length=0)
        elif suffix == ".parquet":
            frame = pl.read_parquet(path)
        else:
            raise OfficialQueriesError(f"{path}: not a .csv or .parquet file")
    except OfficialQueriesError:
        raise
    except Exception as exc:  # polars' and pyarrow's many error types: unreadable is unreadable
        message = " ".join(str(exc).split())[:200]
        raise OfficialQueriesError(f"{path}: cannot be read as {suffix[1:]}: {type(exc).__name__}: {message}") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise OfficialQueriesError(f"{path}: lacks the columns {', '.join(missing)}")
    if frame.height == 0:
        raise OfficialQueriesError(f"{path}: holds no queries")
    return frame.select(COLUMNS).to_dicts()


def read_official_queries(path: str | Path) -> list[Query]:
    """The queries of a published TravelPlanner split file (CSV or parquet), idx = row number."""
    if not str(path).strip():
        raise OfficialQueriesError("no query file given (synthesize.path)")
    path = Path(path)
    if not path.is_file():
        raise OfficialQueriesError(f"{path}: file not found")
    queries = []
    for n, row in enumerate(_rows(path), start=1):
        try:
            queries.append(query_from_row(row, idx=n))
        except ValueError as exc:
            raise OfficialQueriesError(f"{path}: row {n}: {exc}") from None
    return queries


def check_world(queries: Sequence[Query], cities: dict[str, str], path: str | Path) -> None:
    """Every origin is a city of the world, and every destination a city (one-city trips) or a state.

    `cities` maps each city of the sandbox to its state.
    """
    states = set(cities.values())
    for n, q in enumerate(queries, start=1):
        if q.org not in cities:
            place = f"org {q.org!r} is not a city"
        elif q.visiting_city_number == 1 and q.dest not in cities:
            place = f"dest {q.dest!r} is not a city"
        elif q.visiting_city_number > 1 and q.dest not in states:
            place = f"dest {q.dest!r} is not a state"
        else:
            continue
        raise OfficialQueriesError(f"{path}: row {n}: {place} of the world (official queries need world.source: travelplanner)")
