"""probe (travel): whether a policy's tool arguments come from its query, on the test split and on counterfactual queries."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.infer import run_policy
from flows.tasks import task
from star.config import InferParams, ModelParams
from star.io import read_jsonl, write_json, write_text
from star.travel.domain import TravelDomain
from star.travel.evaluation.arguments import accuracy, counterfactuals, probe_table, rows_slot_counts

moved_queries = task(counterfactuals)


@flow(name="probe")
def probe_flow(
    infer: InferParams, model: ModelParams, domain: TravelDomain, policy: str, train: Path, queries: Path, played: Path, model_dir: Path, out: Path
) -> dict[str, float]:
    test = domain.load_tasks(queries)
    moved = moved_queries(domain.sandbox, domain.load_tasks(train), test, infer.seed)
    rows = run_policy(infer, model, domain, policy, moved, model_dir)
    by_id, moved_by_id = {q.idx: q for q in test}, {q.idx: q for q in moved}
    counts = rows_slot_counts(read_jsonl(played / "trajectories.jsonl"), by_id, domain.sandbox)
    probe = rows_slot_counts(rows, moved_by_id, domain.sandbox, old=by_id)
    metrics = {**accuracy(counts, "args"), **accuracy(probe, "counterfactual")}
    write_text(out / "arguments.csv", probe_table(metrics))
    write_json(out / "arguments.json", metrics)
    return metrics
