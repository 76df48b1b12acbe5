"""One plan as the checks read it.

Its days, field by field, and the context every check gets: the query, the
days, the sandbox index and the mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from star.travel.plans.plan_text import from_to, name_city
from star.travel.world.query import Query
from star.travel.world.sandbox_index import SandboxIndex


@dataclass(slots=True)
class DayPlan:
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
    official code does (see `star.travel.evaluation.evaluate`): `given(None)` and
    `blank(None)` are both False, and a check that would hand None to a
    string function raises, which fails it. Strict reads a null as "-".
    """
    if isinstance(value, str):
        return value
    if value is None:
        return "-" if strict else None
    return str(value)


def read_day(day: Any, strict: bool) -> DayPlan:
    get = (lambda k: day.get(k)) if isinstance(day, dict) else (lambda k: getattr(day, k, None))
    fields = ("current_city", "transportation", "breakfast", "attraction", "lunch", "dinner", "accommodation")
    return DayPlan(get("days"), *(_text(get(k), strict) for k in fields))


@dataclass(slots=True)
class PlanContext:
    q: Query
    days: list[DayPlan]
    ix: SandboxIndex
    strict: bool

    def item(self, kind: str, text: str) -> Any | None:
        name, city = name_city(text, self.strict)
        return self.ix.exact(kind, name, city) if self.strict else self.ix.first(kind, name, city)


def leg_ends(d: DayPlan) -> tuple[str, str] | None:
    """A leg's cities: from its own text, else from the day's current city."""
    return from_to(d.transportation) or from_to(d.current_city)
