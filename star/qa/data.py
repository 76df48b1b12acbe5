"""The records of the QA domain: passages to search and questions to answer."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from star.io import read_jsonl, write_jsonl

Source = Literal["synthetic", "hotpotqa", "2wiki", "musique"]
Kind = Literal["bridge", "comparison"]


class Passage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    title: str
    text: str


def passage_id(title: str, text: str) -> str:
    """A stable id from the content, so the same passage has the same id in every file."""
    return hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:12]


class Question(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idx: int
    question: str
    answer: str
    hops: int = Field(ge=1)
    kind: Kind
    source: Source
    supporting: list[str] = Field(default_factory=list)  # passage ids
    level: str = ""  # f"{hops}hop", the key of per-level reports
    qid: str = ""  # the id in the source dataset, if any
    # Search queries that reach the supporting passages, in order (the expert's script).
    plan: list[str] = Field(default_factory=list)
    # Other gold answers (MuSiQue's answer_aliases, 2Wiki's id_aliases.json): EM and F1 take the best match.
    aliases: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _level(self) -> Question:
        if not self.level:
            self.level = f"{self.hops}hop"
        return self

    @model_serializer(mode="wrap")
    def _without_empty_aliases(self, handler: SerializerFunctionWrapHandler) -> dict:
        # Questions without aliases (every synthetic one) dump exactly as before the field existed.
        data = handler(self)
        if not self.aliases:
            data.pop("aliases", None)
        return data

    @property
    def golds(self) -> list[str]:
        """The answer and its aliases, each once."""
        return list(dict.fromkeys([self.answer, *self.aliases]))


def save_questions(path: str | Path, questions: list[Question]) -> None:
    write_jsonl(path, (q.model_dump() for q in questions))


def load_questions(path: str | Path) -> list[Question]:
    return [Question.model_validate(row) for row in read_jsonl(path)]


def save_passages(path: str | Path, passages: list[Passage]) -> None:
    write_jsonl(path, (p.model_dump() for p in passages))


def load_passages(path: str | Path) -> list[Passage]:
    return [Passage.model_validate(row) for row in read_jsonl(path)]
