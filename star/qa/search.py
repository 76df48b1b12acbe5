"""BM25 search over passages (bm25s), and the Search tool built on it.

The index is built once and saved with its passages, so a pipeline can cache
it. Results are ranked by score, ties broken by corpus order, so the same
query always reads the same. Observations are one line per passage,
"Title: text", short enough for a small model's context.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np


def _import_bm25s():
    """bm25s without numba, which it loads where installed (vLLM's venv has it). Scoring here is
    numpy either way (`SearchIndex._scores`), and numba's LLVM bindings, once imported, stop vLLM's
    CPU engine from starting (vllm 0.32 rebinds its kernels by scanning every loaded module)."""
    if "numba" in sys.modules:
        import bm25s
    else:
        sys.modules["numba"] = None  # `import numba` raises ImportError while this is set
        try:
            import bm25s
        finally:
            del sys.modules["numba"]
    return bm25s


bm25s = _import_bm25s()
from bm25s.stopwords import STOPWORDS_EN  # noqa: E402

from star.env.core import Tool, ToolError, ToolResult
from star.qa.data import Passage, load_passages, save_passages

_WORD = re.compile(r"\w+")
_STOP = frozenset(STOPWORDS_EN)
PASSAGES_FILE = "passages.jsonl"
BM25_DIR = "bm25"


def tokenize(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


class SearchIndex:
    def __init__(self, passages: list[Passage], retriever: bm25s.BM25):
        self.passages = passages
        self.retriever = retriever
        self.by_id = {p.id: p for p in passages}

    @classmethod
    def build(cls, passages: list[Passage]) -> SearchIndex:
        if not passages:
            raise ValueError("cannot index an empty list of passages")
        docs = [tokenize(f"{p.title} {p.text}") for p in passages]
        # A sorted vocabulary, so the saved index is the same bytes on every run.
        vocab = {w: i for i, w in enumerate(sorted({w for doc in docs for w in doc}))}
        retriever = bm25s.BM25()
        retriever.index(([[vocab[w] for w in doc] for doc in docs], vocab), show_progress=False)
        return cls(list(passages), retriever)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.retriever.save(directory / BM25_DIR, show_progress=False)
        save_passages(directory / PASSAGES_FILE, self.passages)

    @classmethod
    def load(cls, directory: str | Path) -> SearchIndex:
        directory = Path(directory)
        retriever = bm25s.BM25.load(directory / BM25_DIR, show_progress=False)
        return cls(load_passages(directory / PASSAGES_FILE), retriever)

    def _scores(self, token_ids: list[int]) -> np.ndarray:
        """BM25 score of every passage: the sum of the query words' precomputed columns.

        The same sum as bm25s's own scorer, with one bincount instead of
        np.add.at, which is many times faster for common words.
        """
        m = self.retriever.scores
        indptr, indices, data = m["indptr"], m["indices"], m["data"]
        spans = [slice(indptr[t], indptr[t + 1]) for t in token_ids]
        docs = np.concatenate([indices[s] for s in spans])
        weights = np.concatenate([data[s] for s in spans])
        return np.bincount(docs, weights=weights, minlength=m["num_docs"])

    def ranked(self, query: str, k: int) -> list[int]:
        """Corpus positions of the top k passages with a positive score."""
        vocab = self.retriever.vocab_dict
        ids = [vocab[w] for w in tokenize(query) if w in vocab]
        if not ids or k <= 0:
            return []
        scores = self._scores(ids)
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:
            # Everything tied with the k-th best stays a candidate, so ties break by position.
            # (k-th smallest of the negated scores: numpy's partition is far slower
            # near the end of an array full of ties)
            kth = -np.partition(-scores[hits], k - 1)[k - 1]
            hits = hits[scores[hits] >= kth]
        order = np.lexsort((hits, -scores[hits]))
        return hits[order][:k].tolist()

    def search(self, query: str, k: int) -> list[Passage]:
        return [self.passages[i] for i in self.ranked(query, k)]


# The queries whose reach `retrieval_hits` measures, for a gold passage of a question (the expert's, in its order).
QUERIES = {
    "title": lambda title, question: title,
    "title_question": lambda title, question: f"{title} {question}",
    "question": lambda title, question: question,
}


def retrieval_hits(index: SearchIndex, questions: list, k: int, limit: int = 1000) -> dict[str, float]:
    """Share of gold passages BM25 ranks in the top k, searched by each of `QUERIES`, and by any of them
    (`retrieval/any_top{k}`): on the first `limit` questions, so a large file stays quick."""
    position = {p.id: i for i, p in enumerate(index.passages)}
    hits = {name: 0 for name in [*QUERIES, "any"]}
    total = 0
    for question in questions[:limit]:
        for pid in question.supporting:
            if pid not in position:
                continue
            total += 1
            title = index.passages[position[pid]].title
            found = [position[pid] in index.ranked(make(title, question.question), k) for make in QUERIES.values()]
            for name, hit in zip(QUERIES, found):
                hits[name] += hit
            hits["any"] += any(found)
    return {f"retrieval/{name}_top{k}": n / max(total, 1) for name, n in hits.items()} | {"retrieval/passages": total}


def render(passage: Passage, max_words: int | None = None) -> str:
    """One observation line; long passages (loaded datasets) cut at `max_words`."""
    words = passage.text.split()
    text = passage.text if max_words is None or len(words) <= max_words else " ".join(words[:max_words]) + " ..."
    return f"{passage.title}: {text}"


class QATools:
    """Holds the index; its public method Search is the tool."""

    def __init__(self, index: SearchIndex, top_k: int = 3, max_words: int | None = None):
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k}")
        self.index = index
        self.top_k = top_k
        self.max_words = max_words

    def render(self, passage: Passage) -> str:
        return render(passage, self.max_words)

    def as_tools(self) -> list[Tool]:
        return [Tool(self.Search)]

    def Search(self, query: str) -> str | ToolResult:
        """Search the knowledge base.

        Args:
            query: Words to look for, such as a name.
        """
        if not query.strip():
            raise ToolError("query is empty.")
        hits = self.index.search(query, self.top_k)
        if not hits:
            return ToolResult(f"No passages match '{query.strip()}'.", True, "empty")
        return "\n".join(self.render(p) for p in hits)
