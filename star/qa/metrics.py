"""Answer EM and F1 with the normalisation of the official HotpotQA evaluation.

normalize: lowercase, drop punctuation, drop the articles a/an/the, collapse
whitespace. F1 is over the normalised tokens; when either side is yes, no or
noanswer and the two differ, F1 is 0 (a yes/no answer gets no partial credit).
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


def f1_score(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _SPECIAL or ref in _SPECIAL) and pred != ref:
        return 0.0
    common = Counter(pred.split()) & Counter(ref.split())
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred.split())
    recall = same / len(ref.split())
    return 2 * precision * recall / (precision + recall)
