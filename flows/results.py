"""results: every policy's metrics side by side, as JSON, markdown tables and plots."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.io import write_json, write_text
from star.qa import results as qa_results
from star.travel.results import markdown_table, plot_pass_rates


@task
def collect(reports: Path, policies: list[str]) -> dict[str, dict[str, float]]:
    results = {}
    for policy in policies:
        path = reports / policy / "metrics.json"
        if path.exists():
            results[policy] = json.loads(path.read_text())
    return results


@flow(name="results")
def results_flow(reports: Path, policies: list[str], qa_policies: list[str]) -> dict[str, float]:
    travel, qa = collect(reports, policies), collect(reports / "qa", qa_policies)
    write_json(reports / "results.json", {"travel": travel, "qa": qa, **qa_results.alignment_tax(qa)})
    text = "## TravelPlanner\n\n" + markdown_table(travel)
    if qa:
        text += "\n## Multi-hop QA\n\n" + qa_results.markdown_table(qa)
        qa_results.plot_em(qa, reports / "qa_em.png")
    write_text(reports / "results.md", text)
    plot_pass_rates(travel, reports / "pass_rates.png")
    metrics = {f"{p}/final_pass_rate": m["final_pass_rate"] for p, m in travel.items()}
    metrics.update({f"{p}/em": m["em"] for p, m in qa.items()})
    metrics.update({f"{p}/f1": m["f1"] for p, m in qa.items()})
    return {**metrics, **qa_results.alignment_tax(qa)}
