"""Seeded mutations of model output: byte flips, truncation, tag soup, random JSON, huge numbers, unicode, splices, repeats.

`mutate` garbles a text, `mutate_submission` a submission row; the rest are the single mutators and their material.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

TAGS = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>", "<tool_response>", "</tool_response>",
    "<", ">", "</", "<<answer>>", "<answer", "tool_call>", "<TOOL_CALL>", "<|im_end|>", "<|im_start|>assistant\n", "<think/>",
]  # fmt: skip
UNICODE = [
    "\x00", "\u200b", "\u200f", "\u202e", "\ufeff", "\u2028", "\r", "\r\n", "\t", "\x0b", "\x85", "\xa0", "é", "e\u0301", "İ", "ß",
    "\ufb01", "２０２２", "١٢", "🙂", "👩\u200d👩\u200d👧", "\ud800", "\udfff", "Ω", "中文", "ا", "\U0010ffff", "\\n", "\\u0000", "\\",
]  # fmt: skip
NUMBERS = ["0", "-1", "-0", "1e999", "-1e999", "1e-400", "NaN", "Infinity", "-Infinity", "1" * 400, "9" * 5000, str(2**64), str(-(2**100)), "0x1F", "1_000", "3.0", "٣"]
STRINGS = ["", " ", "-", "null", "None", "Day 1:", "from A to B", "Flight Number: F0001", ";", ",", "\n", "x" * 10_000, "🙂" * 50, "\ud800"]

MAX_CHARS = 100_000  # a mutated text is cut here, so repeats and splices cannot grow it without end


def mutate(rng: random.Random, text: str, pool: list[str], steps: int | None = None) -> str:
    for _ in range(steps or rng.randint(1, 3)):
        text = rng.choice(MUTATORS)(rng, text, pool)[:MAX_CHARS]
    return text


def mutate_submission(rng: random.Random, row: dict, pool: list[str]) -> dict:
    """A submission row with wrong types, missing keys, odd day numbers or a plan that is not a list."""
    row = json.loads(json.dumps(row))
    days = row.get("plan") or []
    roll = rng.random()
    if roll < 0.1:
        row["plan"] = random_value(rng)
    elif roll < 0.2:
        text = json.dumps(days)
        row["plan"] = text[: _at(rng, text)] if rng.random() < 0.5 else text
    elif roll < 0.3 and days:
        row["plan"] = days * rng.choice([2, 10, 60])
    for _ in range(rng.randint(1, 6)):
        if not isinstance(row["plan"], list) or not row["plan"]:
            break
        day = rng.choice(row["plan"])
        if not isinstance(day, dict):
            continue
        key = rng.choice(list(day) + ["day", "extra"])
        kind = rng.random()
        if kind < 0.35:
            day[key] = random_value(rng)
        elif kind < 0.7 and isinstance(day.get(key), str):
            day[key] = mutate(rng, day[key], pool, steps=1)
        else:
            day.pop(key, None)
    if rng.random() < 0.1:
        row["idx"] = random_value(rng)
    return row


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON-ish value: odd numbers, odd strings, nesting."""
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.18:
        return rng.random() < 0.5
    if roll < 0.3:
        return rng.choice([0, -1, 1, 2**31, 2**63, -(2**100), 10**400])
    if roll < 0.4:
        return rng.choice([0.5, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, 5e-324])
    if roll < 0.7 or depth >= 3:
        return rng.choice(STRINGS + UNICODE + TAGS)
    if roll < 0.85:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(STRINGS + ["name", "arguments", "city", "date", "days", "plan"]): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError):
        return repr(value)


def _at(rng: random.Random, text: str) -> int:
    return rng.randint(0, len(text))


def flip_bytes(rng: random.Random, text: str, pool: list[str]) -> str:
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return data.decode("utf-8", rng.choice(["replace", "surrogateescape", "ignore"]))


def truncate(rng: random.Random, text: str, pool: list[str]) -> str:
    cut = _at(rng, text)
    return text[:cut] if rng.random() < 0.8 else text[cut:]


def tag_soup(rng: random.Random, text: str, pool: list[str]) -> str:
    for _ in range(rng.randint(1, 6)):
        roll, at = rng.random(), _at(rng, text)
        if roll < 0.5:
            text = text[:at] + rng.choice(TAGS) + text[at:]
        elif roll < 0.75:
            tag = rng.choice(TAGS)
            text = text.replace(tag, "", 1) if tag in text else text
        else:
            text = text[:at] + rng.choice(TAGS) + rng.choice(pool)[:200] + rng.choice(TAGS) + text[at:]
    return text


def random_json(rng: random.Random, text: str, pool: list[str]) -> str:
    value = random_value(rng)
    if rng.random() < 0.5:
        value = {"name": rng.choice(["SearchFlight", "SearchCity", "Search", "searchflight", "", "Nope"]), "arguments": value}
    body = _dumps(value)
    if rng.random() < 0.2:
        body = body[: _at(rng, body)]
    if "<tool_call>" in text and rng.random() < 0.8:
        return re.sub(r"<tool_call>.*?(</tool_call>|$)", lambda m: f"<tool_call>{body}{m.group(1)}", text, count=1, flags=re.S)
    return text[: _at(rng, text)] + f"<tool_call>{body}</tool_call>"


def mutate_arguments(rng: random.Random, text: str, pool: list[str]) -> str:
    """Keep a call's JSON valid but its name or arguments wrong: deep paths of the tools."""
    match = re.search(r"<tool_call>(.*?)</tool_call>", text, re.S)
    if not match:
        return random_json(rng, text, pool)
    try:
        call = json.loads(match.group(1))
        args = dict(call.get("arguments") or {})
    except (ValueError, AttributeError, TypeError, RecursionError):
        return random_json(rng, text, pool)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        keys = list(args)
        if roll < 0.4 and keys:
            key = rng.choice(keys)
            args[key] = random_value(rng) if rng.random() < 0.5 else mutate(rng, str(args[key]), pool, steps=1)
        elif roll < 0.55 and keys:
            args.pop(rng.choice(keys))
        elif roll < 0.7:
            args[rng.choice(["extra", "city", "date", "nights", "room_type", "query", ""])] = random_value(rng)
        elif roll < 0.85:
            call["name"] = rng.choice(["SearchFlight", "GoogleDistanceMatrix", "SearchAccommodation", "SearchRestaurant", "SearchAttraction", "SearchCity", "Search", "search", " SearchCity", "Search\x00"])
        else:
            call["arguments"] = _dumps(args) if rng.random() < 0.5 else random_value(rng)  # arguments as a string, or junk
    if isinstance(call.get("arguments"), dict) or "arguments" not in call:
        call["arguments"] = args
    return text[: match.start(1)] + _dumps(call) + text[match.end(1) :]


def huge_numbers(rng: random.Random, text: str, pool: list[str]) -> str:
    return re.sub(r"\d+", lambda m: rng.choice(NUMBERS) if rng.random() < 0.4 else m.group(), text)


def unicode(rng: random.Random, text: str, pool: list[str]) -> str:
    for _ in range(rng.randint(1, 10)):
        at = _at(rng, text)
        text = text[:at] + rng.choice(UNICODE) + text[at:]
    return text


def splice(rng: random.Random, text: str, pool: list[str]) -> str:
    other = rng.choice(pool)
    return text[: _at(rng, text)] + other[_at(rng, other) :]


def repeat(rng: random.Random, text: str, pool: list[str]) -> str:
    if not text:
        return text
    start = rng.randrange(len(text))
    span = text[start : start + rng.randint(1, 200)]
    times = rng.choice([2, 10, 100, 2000])
    return text[:start] + span * times + text[start:]


def nesting(rng: random.Random, text: str, pool: list[str]) -> str:
    n = rng.choice([50, 1000, 20_000])
    inner = rng.choice(["[" * n + "]" * n, '{"a":' * n + "1" + "}" * n, "[" * n])
    return random_json(rng, text, pool).replace("<tool_call>", f"<tool_call>{inner}", 1) if rng.random() < 0.3 else f"<tool_call>{inner}</tool_call>"


def lines(rng: random.Random, text: str, pool: list[str]) -> str:
    """Itinerary damage: lines shuffled, dropped, doubled, days renumbered."""
    rows = text.split("\n")
    roll = rng.random()
    if roll < 0.3:
        rng.shuffle(rows)
    elif roll < 0.5 and rows:
        del rows[rng.randrange(len(rows))]
    elif roll < 0.7 and rows:
        rows.insert(rng.randrange(len(rows)), rng.choice(rows))
    else:
        rows = [re.sub(r"^Day \d+", lambda m: f"Day {rng.choice(['0', '-1', '999999', '1' * 30, '٣', '3.5', ''])}", r) for r in rows]
    return "\n".join(rows)


MUTATORS: list[Callable[[random.Random, str, list[str]], str]] = [
    flip_bytes, truncate, tag_soup, random_json, mutate_arguments, huge_numbers, unicode, splice, repeat, nesting, lines,
]  # fmt: skip
