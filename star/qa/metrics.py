"""Answer EM and F1 as the official evaluation scripts compute them.

normalize: lowercase, drop punctuation, drop the articles a/an/the, collapse
whitespace (HotpotQA, 2WikiMultihopQA and MuSiQue share SQuAD's normalisation).

F1 is over the normalised tokens. HotpotQA's script, which 2Wiki's copies: when
either side is yes, no or noanswer and the two differ, F1 is 0 (a yes/no answer
gets no partial credit). MuSiQue's (SQuAD's compute_f1): no such rule, and two
empty answers agree (F1 1).

With aliases, EM and F1 are each the best over the gold answer and its aliases
(`metric_max_over_ground_truths` in MuSiQue's script, `update_answer` in 2Wiki's).
"""

from __future__ import annotations

import re
import string
from collections import Counter

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _overlap(pred: list[str], ref: list[str]) -> float:
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, gold: str) -> float:
    """HotpotQA's (and 2Wiki's) F1."""
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0
    return _overlap(pred.split(), ref.split())


def squad_f1(prediction: str, gold: str) -> float:
    """MuSiQue's F1 (SQuAD's compute_f1)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    return _overlap(pred, ref)


def answer_scores(prediction: str, golds: list[str], source: str) -> dict[str, float]:
    """EM and F1 of a prediction, each the best over `golds` (the answer, then its aliases), by `source`'s script."""
    if not golds:
        raise ValueError("answer_scores needs at least one gold answer")
    f1 = squad_f1 if source == "musique" else f1_score
    return {"em": max(exact_match(prediction, g) for g in golds), "f1": max(f1(prediction, g) for g in golds)}
