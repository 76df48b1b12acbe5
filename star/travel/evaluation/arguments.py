"""Do a travel agent's tool arguments come from its query? Accuracy per slot, and a counterfactual probe.

A model that memorised its training world writes the origins and dates it saw
there. The probe moves each held-out query to an origin and dates that no
training query combined with its destination, and counts how many arguments
follow the new values and how many still carry the old ones.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Iterable
from datetime import date, timedelta

from star.travel.world.query import Query
from star.travel.world.sandbox import Sandbox

SLOTS = ("departure", "destination", "date", "city", "state", "room_type", "house_rule", "cuisine")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def allowed_values(query: Query, sandbox: Sandbox) -> dict[str, set[str]]:
    """The values each slot may take for this query: its origin, destination cities, dates, state and local constraints."""
    cities = {query.dest} if query.visiting_city_number == 1 else set(sandbox.cities_in(query.dest))
    state = query.dest if query.visiting_city_number > 1 else sandbox.state_of(query.dest)
    local = query.local_constraint
    return {
        "departure": {query.org} | cities,
        "destination": {query.org} | cities,
        "date": set(query.date),
        "city": cities,
        "state": {state} if state else set(),
        "room_type": {local["room type"]} if local.get("room type") else set(),
        "house_rule": {local["house rule"]} if local.get("house rule") else set(),
        "cuisine": set(local.get("cuisine") or ()),
    }


def slot_counts(query: Query, calls: Iterable[dict], sandbox: Sandbox, old: Query | None = None) -> Counter:
    """Per slot: `n` arguments, `right` ones allowed by `query`, and `stale` ones allowed only by `old`."""
    allowed = allowed_values(query, sandbox)
    before = allowed_values(old, sandbox) if old else {}
    counts: Counter = Counter()
    for call in calls:
        for slot, value in (call.get("arguments") or {}).items():
            if slot not in allowed:
                continue
            value = str(value)
            counts[f"{slot}/n"] += 1
            counts[f"{slot}/right"] += value in allowed[slot]
            counts[f"{slot}/stale"] += value not in allowed[slot] and value in before.get(slot, ())
    return counts


def accuracy(counts: Counter, prefix: str) -> dict[str, float]:
    """`<prefix>/n` arguments; with any, `<prefix>/<slot>` accuracies, `<prefix>/all` and `<prefix>/stale`."""
    out = {f"{prefix}/n": float(sum(counts[f"{s}/n"] for s in SLOTS))}
    for slot in SLOTS:
        if counts[f"{slot}/n"]:
            out[f"{prefix}/{slot}"] = counts[f"{slot}/right"] / counts[f"{slot}/n"]
    total = sum(counts[f"{s}/n"] for s in SLOTS)
    if total:
        out[f"{prefix}/all"] = sum(counts[f"{s}/right"] for s in SLOTS) / total
        out[f"{prefix}/stale"] = sum(counts[f"{s}/stale"] for s in SLOTS) / total
    return out


def counterfactual(query: Query, seen: set[tuple[str, str, str]], origins: list[str], first: date, last: date, rng: random.Random) -> Query:
    """The query from another origin on shifted dates, a combination absent from `seen` when one exists.

    `seen` holds (origin, destination, first date) of the training queries. The
    text is rewritten in place, so the template and every other slot stay.
    """
    start = date.fromisoformat(query.date[0])
    span = (last - first).days - (query.days - 1)
    shifts = [d for d in range(-span, span + 1) if d and first <= start + timedelta(days=d) and start + timedelta(days=d + query.days - 1) <= last]
    # Dates that overlap the old ones would let a model that kept them score; avoid them when the calendar allows.
    shifts = [d for d in shifts if abs(d) >= query.days] or shifts
    others = [o for o in origins if o not in (query.org, query.dest) and o not in query.query]
    candidates = [(o, d) for o in others for d in shifts or [0]]
    rng.shuffle(candidates)
    fresh = [(o, d) for o, d in candidates if (o, query.dest, (start + timedelta(days=d)).isoformat()) not in seen]
    org, shift = (fresh or candidates or [(query.org, 0)])[0]
    dates = {d: (date.fromisoformat(d) + timedelta(days=shift)).isoformat() for d in query.date}
    text = re.sub(rf"\b{re.escape(query.org)}\b", org, query.query)
    text = _DATE.sub(lambda m: dates.get(m.group(0), m.group(0)), text)
    return query.model_copy(update={"org": org, "date": [dates[d] for d in query.date], "query": text})


def counterfactuals(sandbox: Sandbox, train: list[Query], test: list[Query], seed: int) -> list[Query]:
    """Each test query moved to an origin and dates that no training query combined with its destination."""
    from star.travel.world.tools import TravelTools

    tools = TravelTools(sandbox)
    seen = {(q.org, q.dest, q.date[0]) for q in train}
    origins = sorted({q.org for q in train})
    rng = random.Random(seed)
    first, last = date.fromisoformat(tools.first_date), date.fromisoformat(tools.last_date)
    return [counterfactual(q, seen, origins, first, last, rng) for q in test]


def rows_slot_counts(rows: Iterable[dict], queries: dict[int, Query], sandbox: Sandbox, old: dict[int, Query] | None = None) -> Counter:
    """`slot_counts` summed over trajectory rows, each judged against its query (and its `old` one)."""
    total: Counter = Counter()
    for row in rows:
        calls = [json.loads(c) for c in row["calls"]]
        total += slot_counts(queries[row["query_id"]], calls, sandbox, old=old[row["query_id"]] if old else None)
    return total


def probe_table(metrics: dict[str, float]) -> str:
    """CSV of slot, test accuracy, counterfactual accuracy: the slots both columns have."""
    slots = [s for s in (*SLOTS, "all") if f"args/{s}" in metrics and f"counterfactual/{s}" in metrics]
    return "slot,test,counterfactual\n" + "".join(f"{s},{metrics[f'args/{s}']:.4f},{metrics[f'counterfactual/{s}']:.4f}\n" for s in slots)
