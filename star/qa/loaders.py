"""Loaders for the public multi-hop QA datasets: a file as published becomes questions and passages.

Each dataset is read as it is published and in its common variants, told
apart by content, never by the file's name:

    container   a JSON list, JSON Lines, or parquet (magic bytes PAR1), gzipped or not
    context     HotpotQA's list of [title, sentences] pairs, or the Hugging Face
                datasets layout {title: [...], sentences: [[...]]} (2Wiki's: content)
    facts       [[title, sent_id], ...] or {title: [...], sent_id: [...]}

Rows are checked by pydantic models; anything else is a `DatasetError`, one
line naming the file, the row (or line) and the field.

Passages from every question's context go into one corpus, deduplicated by
title and text (ids are content hashes, see `passage_id`). A question's
`supporting` lists its gold passages in hop order, `plan` their titles.

Kinds and hops:
    HotpotQA     type bridge or comparison as given; 2 hops (two gold paragraphs).
    2Wiki        comparison 2, compositional 2, inference 2 (two gold paragraphs each),
                 bridge_comparison 4 (a bridge on each side, then a comparison);
                 comparison and bridge_comparison are comparisons, the rest bridges.
    MuSiQue      bridge; hops = len(question_decomposition).

Aliases: MuSiQue's `answer_aliases`; 2Wiki's from the release's id_aliases.json
beside the data file (JSON Lines {Q_id, aliases, demonyms}, looked up by the
row's answer_id, or one object {Q_id: [aliases]}) and any `answer_aliases`
field on the rows. HotpotQA has none.

MuSiQue's unanswerable questions (`answerable: false`, the -full version) are
skipped and counted: the official script scores answers on answerable
questions only, and scores the others by predicted answerability, which this
agent does not make.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from star.qa.data import Passage, Question, passage_id

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
WIKI2_HOPS = {"comparison": 2, "compositional": 2, "inference": 2, "bridge_comparison": 4}
WIKI2_KIND = {"comparison": "comparison", "bridge_comparison": "comparison", "compositional": "bridge", "inference": "bridge"}
WIKI2_ALIASES = "id_aliases.json"  # the 2Wiki release's alias file, read from beside the data file


class DatasetError(ValueError):
    """A dataset file that cannot be used, explained in one line."""


@dataclass
class Dataset:
    questions: list[Question]
    passages: list[Passage]
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> questions left out


# ---- rows, as the datasets publish them


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)


def _pairs(value: Any, second: tuple[str, ...]) -> Any:
    """The datasets layout {title: [...], <second>: [...]} as the published list of [title, x] pairs."""
    if not isinstance(value, dict):
        return value
    key = next((k for k in second if k in value), None)
    if "title" not in value or key is None:
        raise ValueError(f"a mapping needs the keys title and {' or '.join(second)}, got {sorted(value)}")
    titles, others = value["title"], value[key]
    if len(titles) != len(others):
        raise ValueError(f"{len(titles)} titles but {len(others)} {key}")
    return [[t, x] for t, x in zip(titles, others)]


class HotpotRow(_Row):
    id: str = Field(validation_alias=AliasChoices("_id", "id"))
    question: str
    answer: str
    type: Literal["bridge", "comparison"]
    context: list[tuple[str, list[str]]]
    supporting_facts: list[tuple[str, int]]

    @field_validator("context", mode="before")
    @classmethod
    def _context(cls, value: Any) -> Any:
        return _pairs(value, ("sentences", "content"))

    @field_validator("supporting_facts", mode="before")
    @classmethod
    def _facts(cls, value: Any) -> Any:
        return _pairs(value, ("sent_id",))


class Wiki2Row(HotpotRow):
    type: Literal["comparison", "bridge_comparison", "compositional", "inference"]
    answer_id: str | None = None  # the answer's Wikidata id, the key of its aliases in id_aliases.json
    answer_aliases: list[str] = Field(default_factory=list)  # inlined by some redistributions


class MusiqueParagraph(_Row):
    idx: int
    title: str
    paragraph_text: str
    is_supporting: bool = False


class MusiqueStep(_Row):
    question: str = ""
    answer: str = ""
    paragraph_support_idx: int | None = None


class MusiqueRow(_Row):
    id: str
    question: str
    answer: str
    answer_aliases: list[str] = Field(default_factory=list)
    answerable: bool = True  # only the -full version has unanswerable questions
    paragraphs: list[MusiqueParagraph]
    question_decomposition: list[MusiqueStep] = Field(min_length=1)


class AliasRow(_Row):
    Q_id: str
    aliases: list[str] = Field(default_factory=list)
    demonyms: list[str] = Field(default_factory=list)


# ---- files, told apart by content


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_values(path: Path, text: str) -> list[tuple[str, Any]]:
    """(where, value) for each top-level value: a list's items, or JSON Lines' lines (one object is one line)."""
    start = text.lstrip()[:1]
    if not start:
        raise DatasetError(f"{path}: an empty file")
    if start == "[":
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        return [(f"row {i + 1}", item) for i, item in enumerate(items)]
    if start != "{":
        raise DatasetError(f"{path}: neither a JSON list, JSON Lines nor parquet (it starts with {_short(text[:20])})")
    values = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as exc:
            if n == 1:  # one object over many lines?
                try:
                    return [("row 1", json.loads(text))]
                except json.JSONDecodeError:
                    pass
            raise DatasetError(f"{path}: line {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    return values


def read_values(path: str | Path) -> list[tuple[str, Any]]:
    """The records of a JSON list, JSON Lines or parquet file (gzipped or not), each with where it is ("row 3", "line 3")."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: a directory, not a dataset file") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read it ({exc.strerror})") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise DatasetError(f"{path}: a broken gzip file ({exc})") from None
    if data[:4] == b"PAR1":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(io.BytesIO(data)).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(f"{path}: a parquet file that cannot be read ({str(exc).splitlines()[0]})") from None
        return [(f"row {i + 1}", row) for i, row in enumerate(rows)]
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: neither UTF-8 text nor parquet (byte {exc.start})") from None
    return _json_values(path, text)


def _looks_like(row: dict) -> str | None:
    if "paragraphs" in row:
        return "musique"
    if "evidences" in row or "answer_id" in row:
        return "2wiki"
    if "context" in row:
        return "hotpotqa"
    return None


def _rows(path: Path, source: str, model: type[_Row]) -> list[tuple[str, Any]]:
    """Each record of the file validated as `model`, with where it is; the first bad one is a DatasetError."""
    values = read_values(path)
    if not values:
        raise DatasetError(f"{path}: no questions in the file")
    rows = []
    for where, value in values:
        if not isinstance(value, dict):
            raise DatasetError(f"{path}: {where}: expected a question object, got {type(value).__name__} {_short(value)}")
        try:
            rows.append((where, model.model_validate(value)))
        except ValidationError as exc:
            error = exc.errors()[0]
            name = ".".join(str(part) for part in error["loc"]) or "row"
            given = f" (got {_short(error['input'])})" if error["type"] != "missing" else ""
            other = _looks_like(value)
            hint = f"; the row looks like {other}: set qa.source: {other}" if other and other != source else ""
            raise DatasetError(f"{path}: {where}: field {name}: {error['msg']}{given}{hint}") from None
    return rows


# ---- datasets


class _Corpus:
    """Passages in first-seen order, one per distinct (title, text)."""

    def __init__(self):
        self.passages: dict[str, Passage] = {}

    def add(self, title: str, text: str) -> str:
        pid = passage_id(title, text)
        self.passages.setdefault(pid, Passage(id=pid, title=title, text=text))
        return pid


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _sentences(sentences: list[str]) -> str:
    return " ".join(s.strip() for s in sentences if s.strip())


def _from_context(rows: list[HotpotRow], source: str, aliases_of) -> Dataset:
    """The HotpotQA shape, which 2WikiMultihopQA shares."""
    corpus = _Corpus()
    questions = []
    for i, row in enumerate(rows):
        ids: dict[str, str] = {}
        for title, sentences in row.context:
            ids.setdefault(title, corpus.add(title, _sentences(sentences)))
        titles = _unique([title for title, _ in row.supporting_facts])
        kind, hops = (WIKI2_KIND[row.type], WIKI2_HOPS[row.type]) if source == "2wiki" else (row.type, 2)
        questions.append(
            Question(
                idx=i, qid=row.id, question=row.question, answer=row.answer, hops=hops, kind=kind, source=source,
                supporting=[ids[t] for t in titles if t in ids], plan=titles, aliases=aliases_of(row),
            )
        )
    return Dataset(questions, list(corpus.passages.values()))


def _other_answers(answer: str, aliases: list[str]) -> list[str]:
    return [a for a in _unique(aliases) if a.strip() and a != answer]


def load_hotpotqa(path: str | Path) -> Dataset:
    """HotpotQA (distractor or fullwiki with answers; published JSON list, JSON Lines or the datasets layout)."""
    rows = [row for _, row in _rows(Path(path), "hotpotqa", HotpotRow)]
    return _from_context(rows, "hotpotqa", lambda row: [])


def _wiki2_aliases(path: Path) -> dict[str, list[str]]:
    """{answer_id: aliases} from the release's id_aliases.json beside `path`, if it is there."""
    aliases_file = path.with_name(WIKI2_ALIASES)
    if not aliases_file.is_file():
        return {}
    values = read_values(aliases_file)
    if len(values) == 1 and isinstance(values[0][1], dict) and "Q_id" not in values[0][1]:  # one {Q_id: [aliases]} object
        (where, table), = values
        if not all(isinstance(v, list) and all(isinstance(a, str) for a in v) for v in table.values()):
            raise DatasetError(f"{aliases_file}: {where}: expected {{Q_id: [aliases]}} or lines of {{Q_id, aliases, demonyms}}")
        return {str(k): v for k, v in table.items()}
    return {row.Q_id: row.aliases + row.demonyms for _, row in _rows(aliases_file, "2wiki", AliasRow)}


def load_2wiki(path: str | Path) -> Dataset:
    """2WikiMultihopQA (published JSON list, JSON Lines or the datasets layout), aliases from id_aliases.json beside it."""
    path = Path(path)
    table = _wiki2_aliases(path)
    rows = [row for _, row in _rows(path, "2wiki", Wiki2Row)]
    return _from_context(rows, "2wiki", lambda row: _other_answers(row.answer, table.get(row.answer_id or "", []) + row.answer_aliases))


def load_musique(path: str | Path) -> Dataset:
    """MuSiQue (published JSON Lines, answerable or full; or a JSON list, or parquet)."""
    path = Path(path)
    corpus = _Corpus()
    questions: list[Question] = []
    skipped = {"unanswerable": 0}
    for where, row in _rows(path, "musique", MusiqueRow):
        if not row.answerable:
            skipped["unanswerable"] += 1
            continue
        paragraphs = sorted(row.paragraphs, key=lambda p: p.idx)
        ids = [corpus.add(p.title, p.paragraph_text.strip()) for p in paragraphs]
        position = {p.idx: k for k, p in enumerate(paragraphs)}
        # The decomposition names the supporting paragraph of each hop, in hop order.
        order = [d.paragraph_support_idx for d in row.question_decomposition if d.paragraph_support_idx is not None]
        missing = [j for j in order if j not in position]
        if missing:
            raise DatasetError(f"{path}: {where}: field question_decomposition: paragraph_support_idx {missing[0]} names no paragraph")
        order += [p.idx for p in paragraphs if p.is_supporting]
        supporting = _unique([ids[position[j]] for j in order])
        questions.append(
            Question(
                idx=len(questions), qid=row.id, question=row.question, answer=row.answer,
                hops=len(row.question_decomposition), kind="bridge", source="musique",
                supporting=supporting, plan=_unique([corpus.passages[pid].title for pid in supporting]),
                aliases=_other_answers(row.answer, row.answer_aliases),
            )
        )
    return Dataset(questions, list(corpus.passages.values()), skipped)


LOADERS = {"hotpotqa": load_hotpotqa, "2wiki": load_2wiki, "musique": load_musique}


def load_dataset(source: str, path: str | Path) -> Dataset:
    if source not in LOADERS:
        raise DatasetError(f"unknown dataset {source!r}; known: {', '.join(LOADERS)}")
    dataset = LOADERS[source](path)
    if not dataset.questions:
        skipped = ", ".join(f"{n} {why}" for why, n in dataset.skipped.items() if n)
        raise DatasetError(f"{path}: no questions left to use" + (f" ({skipped} skipped)" if skipped else ""))
    return dataset


# ---- splits of a public file


def split_counts(available: int, sizes: dict[str, int], what: str = "the file", warn: bool = True) -> dict[str, int]:
    """Questions per split: the sizes asked for, or, when `available` is fewer, shares of it in
    their proportion (largest remainders first), at least one for every split asked for (a warning)."""
    wanted = {s: sizes.get(s, 0) for s in SPLITS}
    total = sum(wanted.values())
    if total <= available:
        return wanted
    asked = [s for s in SPLITS if wanted[s] > 0]
    if available < len(asked):
        raise DatasetError(
            f"{what}: {available} questions cannot fill the {len(asked)} splits asked for ({', '.join(asked)}); "
            "use a larger file, or size some splits 0 in qa.questions.sizes"
        )
    exact = {s: wanted[s] * available / total for s in asked}
    counts = {s: max(1, math.floor(exact[s])) if s in asked else 0 for s in SPLITS}
    by_remainder = sorted(asked, key=lambda s: (-(exact[s] - math.floor(exact[s])), SPLITS.index(s)))
    while sum(counts.values()) < available:
        for s in by_remainder:
            if sum(counts.values()) < available:
                counts[s] += 1
    while sum(counts.values()) > available:  # the minimum of one took questions from the largest split
        largest = max(asked, key=lambda s: (counts[s], -SPLITS.index(s)))
        counts[largest] -= 1
    if warn:
        log.warning(
            "%s has %d questions, fewer than the %d asked for (%s): split by proportion: %s",
            what, available, total, ", ".join(f"{s} {wanted[s]}" for s in SPLITS), ", ".join(f"{s} {counts[s]}" for s in SPLITS),
        )
    return counts


def split_questions(questions: list[Question], sizes: dict[str, int], seed: int, what: str = "the file") -> dict[str, list[Question]]:
    """A public file is one pool: shuffled by seed, then cut to the split sizes (see `split_counts`)."""
    pool = list(questions)
    random.Random(seed).shuffle(pool)
    splits, start = {}, 0
    for split, n in split_counts(len(pool), sizes, what).items():
        splits[split] = pool[start : start + n]
        start += n
    return splits
