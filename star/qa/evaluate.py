"""QA evaluation: EM/F1 per answer, aggregates per hop count and source, and
the Naive RAG baseline's prompt (one retrieval with the question, no tools)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from star.qa.data import Question
from star.qa.metrics import answer_scores
from star.qa.search import SearchIndex, render

NAIVE_RAG_SYSTEM_PROMPT = "Answer the question from the passages. Reply with a short answer in <answer>...</answer>."


def score_answer(question: Question, answer: str | None) -> dict[str, float]:
    """EM and F1 as the official script of the question's dataset scores them, aliases included."""
    if answer is None:
        return {"em": 0.0, "f1": 0.0}
    return answer_scores(answer, question.golds, question.source)


def _mean(rows: list[dict[str, Any]]) -> dict[str, float]:
    n = len(rows)
    return {
        "em": sum(r["evaluation"]["em"] for r in rows) / n if n else 0.0,
        "f1": sum(r["evaluation"]["f1"] for r in rows) / n if n else 0.0,
        "n": n,
    }


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Overall, per hop count and per source, from trajectory rows (keys hops, source, evaluation).

    Besides the nested `by_hops` and `by_source`, flat keys (`em`, `2hop/em`,
    `hotpotqa/f1`, ...) make one row of a results table.
    """
    groups: dict[str, dict[str, list]] = {"by_hops": defaultdict(list), "by_source": defaultdict(list)}
    for row in rows:
        groups["by_hops"][str(row["hops"])].append(row)
        groups["by_source"][row["source"]].append(row)
    out: dict[str, Any] = _mean(rows)
    for name, by in groups.items():
        out[name] = {key: _mean(by[key]) for key in sorted(by, key=lambda k: (len(k), k))}
    for hops, stats in out["by_hops"].items():
        out.update({f"{hops}hop/{m}": stats[m] for m in ("em", "f1", "n")})
    for source, stats in out["by_source"].items():
        out.update({f"{source}/{m}": stats[m] for m in ("em", "f1", "n")})
    return out


def naive_rag_prompt(question: Question, index: SearchIndex, k: int, max_words: int | None = None) -> list[dict[str, str]]:
    """Chat messages for the Naive RAG baseline: the top k passages for the question text, then the question."""
    passages = "\n".join(render(p, max_words) for p in index.search(question.question, k)) or "(none)"
    return [
        {"role": "system", "content": NAIVE_RAG_SYSTEM_PROMPT},
        {"role": "user", "content": f"Passages:\n{passages}\nQuestion: {question.question}"},
    ]
