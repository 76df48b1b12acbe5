"""A travel policy's answers as the official submission, and the submission's TravelPlanner scores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from star.travel.plans.plan import Plan, read_submission
from star.travel.world.query import Query


def format_answers(queries: list[Query], rows: list[dict], kind: str, options: dict[str, Any]) -> list[Plan]:
    """One plan per query, in the queries' order: its row's answer formatted by `kind` (rules | llm),
    or an undelivered plan where the policy gave none."""
    from star.travel.plans.format import format_itinerary

    by_query = {row["query_id"]: row for row in rows}
    plans = []
    for query in queries:
        row = by_query.get(query.idx)
        answer = row.get("answer") if row else None
        if not answer:
            plans.append(Plan(idx=query.idx, query=query.query, error="no final answer"))
            continue
        plan = format_itinerary(answer, query, kind=kind, **options)
        plan.query = query.query
        plans.append(plan)
    return plans


def score_submission(queries: list[Query], plans: Path, world: Path, mode: str) -> tuple[dict, list[dict]]:
    """(the aggregate metrics, one row of scores per query with its level and days)."""
    from star.travel.evaluation.evaluate import evaluate_plans
    from star.travel.evaluation.metrics import aggregate
    from star.travel.world.sandbox import Sandbox

    evaluations = evaluate_plans(queries, read_submission(plans), Sandbox.load(world), mode)
    rows = [{**e.to_dict(), "level": q.level, "days": q.days} for q, e in zip(queries, evaluations)]
    return aggregate(queries, evaluations), rows
