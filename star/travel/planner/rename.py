"""Consistent renaming of travel trajectories and worlds, an SFT augmentation.

A renamed copy of an expert trajectory swaps every value the agent copies for
another of its kind, the same way in every message: cities among cities, each
kind of place among its own kind, flight numbers to numbers no flight has, and
all dates by one shift; or, within the world (`within_world`), flight numbers
among the world's own with the dates kept, so that a tokenizer holding each of
the world's identifiers as one token reads every renamed value as one of its
tokens. The plan stays right for the renamed query in the equally renamed world
(`rename_world`), but the student can only predict its names, dates and flight
numbers by copying them from its context: memorising the world no longer lowers
the loss.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

import polars as pl

from star.travel.world.sandbox import Sandbox

MAX_SHIFT_DAYS = 60
PLACES = ("accommodations", "restaurants", "attractions")  # each permuted within itself, by its `name` column
CITY_COLUMNS = {"flights": ("origin", "dest"), "distances": ("origin", "dest"), "cities": ("city",)} | {t: ("city",) for t in PLACES}
_FLIGHT = re.compile(r"([A-Za-z]+)([1-9]\d*|0)")  # letters, then a number: F1234 (a world's F0123 keeps its number)


class Vocabulary:
    """What a world lets a renaming touch, found once per world: its names by category and its flight numbers."""

    def __init__(self, world: Sandbox):
        tables = world.tables()
        found = {"city": {v for t, cols in CITY_COLUMNS.items() for c in cols for v in tables[t][c].drop_nulls()}}
        found |= {t: set(tables[t]["name"].drop_nulls()) for t in PLACES}
        # States keep their names. That stays consistent: each renamed city keeps its
        # state, so SearchCity{state} lists the renamed cities (and the city permutation
        # already scrambles which cities a state has). A name that is also a state or in
        # two categories (19 in the real database, e.g. New York), a word the tools print
        # beside names (room types, cuisines, house rules: a real place is named "Private
        # room"), or a name without a letter ("-", "#1") stays as it is: in
        # text one cannot tell which of its meanings an occurrence has.
        words = set(world.cities["state"]) | set(tables["accommodations"]["room_type"])
        words |= {w.strip() for text in tables["restaurants"]["cuisines"].drop_nulls() for w in text.split(",")}
        words |= {w.strip() for text in tables["accommodations"]["house_rules"].drop_nulls() for w in text.split("&")}
        counts = Counter(n for names in [*found.values(), words] for n in names if n and n.strip())
        renamable = {n for n, k in counts.items() if k == 1 and any(c.isalpha() for c in n)}
        self.categories = {k: sorted(names & renamable) for k, names in found.items()}
        self.flights = frozenset(world.flights["flight_number"].drop_nulls())
        self.ordered_flights = sorted(self.flights)  # a fixed order to draw from: the same seed, the same renaming
        self.shapes = Counter((m[1], len(m[2])) for n in self.flights if (m := _FLIGHT.fullmatch(n)))
        # Every known name is matched, fixed ones too, longest first, so that a fixed
        # "New York" is never read as a renamable "York" inside it.
        known = sorted(counts, key=lambda n: (-len(n), n))
        self.pattern = re.compile(
            rf"(?<!\w)(?P<name>{'|'.join(map(re.escape, known)) or '(?!)'})(?!\w)"
            r"|(?<![\w-])(?P<date>\d{4}-\d{2}-\d{2})(?![\w-])"  # ISO dates, as queries, tools and plans write them
            r"|(?<!\w)(?P<flight>[A-Za-z]+\d+)(?!\w)"
        )


@dataclass
class Renaming:
    """One consistent renaming; flight numbers get their new numbers as they are first met."""

    vocabulary: Vocabulary
    names: dict[str, str]
    days: int
    rng: random.Random
    within_world: bool = False  # flight numbers to other flights' numbers, not to numbers no flight has
    flights: dict[str, str] = field(default_factory=dict)
    fresh: set[str] = field(default_factory=set)  # numbers given so far
    used: Counter = field(default_factory=Counter)  # fresh numbers drawn, by shape

    def name(self, value: str) -> str:
        return self.names.get(value, value)

    def date(self, value: str) -> str:
        try:
            return (date.fromisoformat(value) + timedelta(days=self.days)).isoformat()
        except ValueError:  # not a calendar date: nothing to shift
            return value

    def flight(self, number: str) -> str:
        """Another number for each of the world's flights (other text stays): within the world another flight's, else a new one."""
        match = _FLIGHT.fullmatch(number)
        if number not in self.vocabulary.flights or match is None:
            return number
        if number not in self.flights:
            self.flights[number] = self._world_flight(number) if self.within_world else self._new_number(*match.groups())
            self.fresh.add(self.flights[number])
        return self.flights[number]

    def _new_number(self, prefix: str, digits: str) -> str:
        """A number of the same shape (letters, digit count) that no flight of the world has."""
        shape = (prefix, len(digits))
        low, high = (10 ** (len(digits) - 1) if len(digits) > 1 else 0), 10 ** len(digits)
        if self.vocabulary.shapes[shape] + self.used[shape] >= high - low:
            raise ValueError(f"no flight number of the shape of {prefix}{digits} is left unused: the world has too many")
        while (fresh := f"{prefix}{self.rng.randrange(low, high)}") in self.vocabulary.flights or fresh in self.fresh:
            pass
        self.used[shape] += 1
        return fresh

    def _world_flight(self, number: str) -> str:
        """Another flight of the world whose number no other flight was given yet: one bijection of the world's numbers."""
        ordered = self.vocabulary.ordered_flights
        for _ in range(64):  # a trajectory meets a handful of the thousands of flights: almost always the first try
            if (other := self.rng.choice(ordered)) != number and other not in self.fresh:
                return other
        left = [f for f in ordered if f not in self.fresh]  # renaming the whole world: the last few draws
        return next((f for f in left if f != number), left[0])


def _derangement(items: list[str], rng: random.Random) -> list[str]:
    """A uniform shuffle with no item in its place (by rejection: about e tries)."""
    if len(items) < 2:
        return list(items)
    while True:
        out = list(items)
        rng.shuffle(out)
        if all(a != b for a, b in zip(items, out)):
            return out


def draw_renaming(vocabulary: Vocabulary, rng: random.Random, within_world: bool = False) -> Renaming:
    names = {}
    for members in vocabulary.categories.values():
        names.update(zip(members, _derangement(members, rng)))
    days = rng.randint(1, MAX_SHIFT_DAYS)  # drawn either way, so both modes swap the same names
    # Flight numbers are drawn lazily, from their own stream, so the draw does not
    # depend on how many the texts renamed so far contained.
    return Renaming(vocabulary, names, 0 if within_world else days, random.Random(rng.getrandbits(64)), within_world)


def rename_text(text: str, renaming: Renaming) -> str:
    """One pass over the text: a name, once replaced, is never renamed again."""

    def swap(match: re.Match) -> str:
        value, kind = match.group(), match.lastgroup
        return renaming.name(value) if kind == "name" else renaming.date(value) if kind == "date" else renaming.flight(value)

    return renaming.vocabulary.pattern.sub(swap, text)


def rename_value(value: Any, renaming: Renaming) -> Any:
    """Every string inside a JSON-like value renamed (keys kept): a message, a row, a query."""
    if isinstance(value, str):
        return rename_text(value, renaming)
    if isinstance(value, list):
        return [rename_value(v, renaming) for v in value]
    if isinstance(value, dict):
        return {k: rename_value(v, renaming) for k, v in value.items()}
    return value


def rename_messages(messages: list[dict], renaming: Renaming) -> list[dict]:
    """Every message of a trajectory: system, user, thoughts, tool calls with their JSON arguments, observations.

    Observations keep their row order: the renamed world's tools would list a state's
    cities alphabetically and break price ties by name, which no plan depends on.
    """
    return rename_value(messages, renaming)


def rename_world(world: Sandbox, renaming: Renaming) -> Sandbox:
    """The world as the renamed trajectories see it: same rows in the same order, values renamed."""
    swaps: dict[str, Callable[[str], str]] = {c: renaming.name for c in ("name", "city", "origin", "dest")}
    swaps |= {"flight_number": renaming.flight, "date": renaming.date, "address": lambda text: rename_text(text, renaming)}

    def table(frame: pl.DataFrame) -> pl.DataFrame:
        columns = [c for c in frame.columns if c in swaps]
        return frame.with_columns(pl.col(c).replace({v: swaps[c](v) for v in frame[c].unique(maintain_order=True).drop_nulls()}) for c in columns)

    return Sandbox(**{name: table(frame) for name, frame in world.tables().items()})


def renamed_copies(row: dict, vocabulary: Vocabulary, copies: int, rng: random.Random, within_world: bool = False) -> list[dict]:
    """`copies` renamed copies of a trajectory row (messages, answer, plan, calls alike), numbered 1.. in `renamed`."""
    return [{**rename_value(row, draw_renaming(vocabulary, rng, within_world)), "renamed": k} for k in range(1, copies + 1)]
