"""results: every policy's metrics side by side, as JSON, a markdown table and a plot."""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.io import write_json, write_text
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
def results_flow(reports: Path, policies: list[str]) -> dict[str, float]:
    results = collect(reports, policies)
    write_json(reports / "results.json", results)
    write_text(reports / "results.md", markdown_table(results))
    plot_pass_rates(results, reports / "pass_rates.png")
    return {f"{p}_final_pass_rate": m["final_pass_rate"] for p, m in results.items()}
