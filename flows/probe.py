"""probe: whether a policy's tool arguments come from its query, on the test split and on counterfactual queries."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import date
from pathlib import Path

from prefect import flow

from flows.infer import run_model
from flows.tasks import task
from star.config import EnvParams, InferParams, ModelParams
from star.io import read_jsonl, write_json, write_text
from star.travel.arguments import SLOTS, accuracy, counterfactual, slot_counts
from star.travel.query import Query
from star.travel.sandbox import Sandbox
from star.travel.tools import TravelTools


@task
def counterfactuals(sandbox: Sandbox, train: list[Query], test: list[Query], seed: int) -> list[Query]:
    tools = TravelTools(sandbox)
    seen = {(q.org, q.dest, q.date[0]) for q in train}
    origins = sorted({q.org for q in train})
    rng = random.Random(seed)
    first, last = date.fromisoformat(tools.first_date), date.fromisoformat(tools.last_date)
    return [counterfactual(q, seen, origins, first, last, rng) for q in test]


def calls(row: dict) -> list[dict]:
    return [json.loads(c) for c in row["calls"]]


@flow(name="probe")
def probe_flow(infer: InferParams, env: EnvParams, model: ModelParams, policy: str, world: Path, train: Path, queries: Path, played: Path, model_dir: Path, out: Path) -> dict[str, float]:
    sandbox = Sandbox.load(world)
    test = [Query.model_validate(r) for r in read_jsonl(queries)]
    by_id = {q.idx: q for q in test}
    counts = sum((slot_counts(by_id[r["query_id"]], calls(r), sandbox) for r in read_jsonl(played / "trajectories.jsonl")), Counter())
    moved = counterfactuals(sandbox, [Query.model_validate(r) for r in read_jsonl(train)], test, infer.seed)
    rows = run_model(infer, env, model, sandbox, moved, model_dir, policy)
    moved_by_id = {q.idx: q for q in moved}
    probe = sum((slot_counts(moved_by_id[r["query_id"]], calls(r), sandbox, old=by_id[r["query_id"]]) for r in rows), Counter())
    metrics = {**accuracy(counts, "args"), **accuracy(probe, "counterfactual")}
    slots = [s for s in (*SLOTS, "all") if f"args/{s}" in metrics and f"counterfactual/{s}" in metrics]
    table = "slot,test,counterfactual\n" + "".join(f"{s},{metrics[f'args/{s}']:.4f},{metrics[f'counterfactual/{s}']:.4f}\n" for s in slots)
    write_text(out / "arguments.csv", table)
    write_json(out / "arguments.json", metrics)
    return metrics
