"""Searches per second over 100,000 passages: star's bm25s index against rank_bm25.

The corpus is a seeded synthetic knowledge world of 100,000 entities, one
passage each. The workload mixes the two kinds of search the QA domain makes:
entity names (the agent's hop-by-hop searches) and whole question texts (the
Naive RAG baseline's one retrieval). Both sides get the same tokens and
return the top 3; rank_bm25 scores every document in Python on every query,
so it runs fewer of the same queries, and each rate is per query.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json
import random
import time

from rank_bm25 import BM25Okapi

from star.qa.search import SearchIndex, tokenize
from star.qa.specs import QAWorldSpec, QuestionSpec
from star.qa.synthesize import synthesize_questions
from star.qa.world import build_world

# 60,000 people + 25,000 companies + 14,000 cities + 1,000 countries
WORLD = QAWorldSpec(seed=0, num_people=60_000, num_orgs=25_000, num_places=14_000, num_countries=1_000, name_syllables=3)
QUERIES = 4_000
BASELINE_QUERIES = 100
K = 3


def workload(world, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    questions = synthesize_questions(world, QuestionSpec(seed=seed, sizes={"train": n // 2, "validation": 0, "test": 0}))["train"]
    names = list(world.entities)
    queries = [q.question for q in questions] + [rng.choice(names) for _ in range(n - len(questions))]
    rng.shuffle(queries)
    return queries


def timed(fn, queries) -> tuple[float, list]:
    """Searches per second, and the results."""
    start = time.perf_counter()
    results = [fn(q) for q in queries]
    return len(queries) / (time.perf_counter() - start), results


def main() -> None:
    start = time.perf_counter()
    world = build_world(WORLD)
    passages = world.passages()
    queries = workload(world, QUERIES)
    world_s = time.perf_counter() - start

    start = time.perf_counter()
    index = SearchIndex.build(passages)
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    baseline = BM25Okapi([tokenize(f"{p.title} {p.text}") for p in passages])
    baseline_build_s = time.perf_counter() - start

    ours, our_top = timed(lambda q: index.search(q, K), queries)
    theirs, their_top = timed(lambda q: baseline.get_top_n(tokenize(q), passages, n=K), queries[:BASELINE_QUERIES])
    # Both should find the same best passage for a name (the entity's own).
    names = [i for i, q in enumerate(queries[:BASELINE_QUERIES]) if " " not in q]
    agree = sum(our_top[i][0] == their_top[i][0] for i in names) / len(names)

    print(f"corpus: {len(passages):,} passages, world and queries in {world_s:.1f} s")
    print(f"index build: bm25s {build_s:.1f} s, rank_bm25 {baseline_build_s:.1f} s")
    print(f"star (bm25s): {ours:10,.0f} searches/s over {len(queries):,} queries (half names, half questions)")
    print(f"rank_bm25:    {theirs:10,.1f} searches/s over {BASELINE_QUERIES:,} of the same queries")
    print(f"same top passage for {agree:.0%} of {len(names)} name queries")
    print(json.dumps({
        "searches_per_s": round(ours),
        "baseline_searches_per_s": round(theirs, 1),
        "ratio": round(ours / theirs, 1),
        "passages": len(passages),
        "index_build_s": round(build_s, 2),
    }))


if __name__ == "__main__":
    main()
