"""format and evaluate: itineraries to official plans, plans to TravelPlanner metrics."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.io import atomic_path, read_jsonl, write_json, write_jsonl
from star.travel.plans.plan import Plan, write_submission
from star.travel.specs import EvaluateParams, FormatParams
from star.travel.world.query import read_queries


@task
def format_answers(format: FormatParams, queries: Path, trajectories: Path) -> list[Plan]:
    from star.travel.plans.submission import format_answers

    options = format.llm.model_dump() if format.kind == "llm" else {}
    return format_answers(read_queries(queries), read_jsonl(trajectories), format.kind, options)


@flow(name="format")
def format_flow(format: FormatParams, queries: Path, trajectories: Path, out: Path) -> dict[str, float]:
    """Write the submission; one that breaks the official format rules is never written (a formatter bug)."""
    from star.travel.plans.format_check import SubmissionFormatError, check_file

    plans = format_answers(format, queries, trajectories)
    with atomic_path(out) as tmp:
        write_submission(tmp, plans)
        violations = check_file(tmp, read_queries(queries))
        if violations:
            import mlflow

            if mlflow.active_run() is not None:  # the metric of a failed run too
                mlflow.log_metric("format_violations", len(violations))
            raise SubmissionFormatError(out, violations)
    return {"plans": len(plans), "delivered": sum(p.delivered for p in plans), "format_violations": len(violations)}


@task
def score(evaluate: EvaluateParams, world: Path, queries: Path, plans: Path) -> tuple[dict, list[dict]]:
    from star.travel.plans.submission import score_submission

    return score_submission(read_queries(queries), plans, world, evaluate.mode)


@flow(name="evaluate")
def evaluate_flow(evaluate: EvaluateParams, world: Path, queries: Path, plans: Path, out: Path) -> dict[str, float]:
    from star.travel.results import flat_metrics

    summary, rows = score(evaluate, world, queries, plans)
    metrics = flat_metrics(summary)
    write_json(out / "metrics.json", metrics)
    write_json(out / "summary.json", summary)
    write_jsonl(out / "rows.jsonl", rows)
    return {k.replace("/", "_"): v for k, v in metrics.items() if isinstance(v, (int, float))}
