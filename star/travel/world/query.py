"""A TravelPlanner query: the structured fields plus its natural-language text."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

LOCAL_KEYS = ("house rule", "cuisine", "room type", "transportation")


class Query(BaseModel):
    """Field names and value conventions follow the official query files."""

    idx: int = 0
    org: str
    dest: str
    days: int = Field(ge=1)
    visiting_city_number: int = Field(ge=1)
    date: list[str]
    people_number: int = Field(ge=1)
    # keys: house rule, cuisine (list), room type, transportation; None = not set
    local_constraint: dict[str, Any] = Field(default_factory=lambda: {k: None for k in LOCAL_KEYS})
    budget: int = Field(ge=0)
    query: str = ""
    level: str = "easy"

    @field_validator("date", mode="before")
    @classmethod
    def _dates(cls, value: Any) -> Any:
        # The official files store lists as Python literals in strings.
        return ast.literal_eval(value) if isinstance(value, str) else value

    @field_validator("local_constraint", mode="before")
    @classmethod
    def _local(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = ast.literal_eval(value)
        value = dict(value or {})
        for key in LOCAL_KEYS:
            value.setdefault(key, None)
        return value

    def to_row(self) -> dict[str, Any]:
        """A flat JSON-able row (local_constraint kept as a dict)."""
        return json.loads(self.model_dump_json())


def read_queries(path: str | Path) -> list[Query]:
    """Queries in the official format, one JSON object per line; idx = line position unless given."""
    queries = []
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for n, row in enumerate(rows, start=1):
        row = dict(row)
        row.setdefault("idx", n)
        queries.append(Query.model_validate(row))
    return queries
