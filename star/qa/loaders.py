"""Loaders for the public multi-hop QA datasets, each returning (questions, passages).

Passages from every question's context go into one corpus, deduplicated by
title and text (ids are content hashes, see `passage_id`). A question's
`plan` is its supporting titles in order, the searches that reach them.

Kinds and hops:
    HotpotQA     type bridge or comparison as given; 2 hops (two gold paragraphs).
    2Wiki        comparison 2, compositional 2, inference 2 (two gold paragraphs each),
                 bridge_comparison 4 (a bridge on each side, then a comparison);
                 comparison and bridge_comparison are comparisons, the rest bridges.
    MuSiQue      bridge; hops = len(question_decomposition). Questions marked
                 unanswerable (the "full" version) are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from star.io import read_jsonl
from star.qa.data import Passage, Question, passage_id

WIKI2_HOPS = {"comparison": 2, "compositional": 2, "inference": 2, "bridge_comparison": 4}
WIKI2_KIND = {"comparison": "comparison", "bridge_comparison": "comparison", "compositional": "bridge", "inference": "bridge"}


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


def _from_context(rows: list[dict[str, Any]], source: str, kind_of, hops_of) -> tuple[list[Question], list[Passage]]:
    """The HotpotQA shape, which 2WikiMultihopQA shares."""
    corpus = _Corpus()
    questions = []
    for i, row in enumerate(rows):
        ids = {}
        for title, sentences in row["context"]:
            ids.setdefault(title, corpus.add(title, _sentences(sentences)))
        titles = _unique([title for title, _ in row["supporting_facts"]])
        questions.append(
            Question(
                idx=i, qid=str(row["_id"]), question=row["question"], answer=row["answer"],
                hops=hops_of(row), kind=kind_of(row), source=source,
                supporting=[ids[t] for t in titles if t in ids], plan=titles,
            )
        )
    return questions, list(corpus.passages.values())


def load_hotpotqa(path: str | Path) -> tuple[list[Question], list[Passage]]:
    """HotpotQA (distractor or fullwiki JSON list with answers)."""
    rows = json.loads(Path(path).read_text())
    return _from_context(rows, "hotpotqa", lambda r: r["type"], lambda r: 2)


def load_2wiki(path: str | Path) -> tuple[list[Question], list[Passage]]:
    """2WikiMultihopQA (JSON list)."""
    rows = json.loads(Path(path).read_text())
    return _from_context(rows, "2wiki", lambda r: WIKI2_KIND[r["type"]], lambda r: WIKI2_HOPS[r["type"]])


def load_musique(path: str | Path) -> tuple[list[Question], list[Passage]]:
    """MuSiQue (JSONL, answerable or full)."""
    corpus = _Corpus()
    questions = []
    for row in read_jsonl(path):
        if not row.get("answerable", True):
            continue
        paragraphs = sorted(row["paragraphs"], key=lambda p: p["idx"])
        ids = [corpus.add(p["title"], p["paragraph_text"].strip()) for p in paragraphs]
        # The decomposition names the supporting paragraph of each hop, in hop order.
        order = [d["paragraph_support_idx"] for d in row["question_decomposition"] if d.get("paragraph_support_idx") is not None]
        order += [p["idx"] for p in paragraphs if p["is_supporting"]]
        position = {p["idx"]: k for k, p in enumerate(paragraphs)}
        supporting = _unique([ids[position[j]] for j in order if j in position])
        questions.append(
            Question(
                idx=len(questions), qid=str(row["id"]), question=row["question"], answer=row["answer"],
                hops=len(row["question_decomposition"]), kind="bridge", source="musique",
                supporting=supporting, plan=_unique([corpus.passages[pid].title for pid in supporting]),
            )
        )
    return questions, list(corpus.passages.values())


LOADERS = {"hotpotqa": load_hotpotqa, "2wiki": load_2wiki, "musique": load_musique}
