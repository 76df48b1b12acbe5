"""results: every policy's metrics side by side, as JSON, markdown tables and plots (star/results.py)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.results import write_results


@flow(name="results")
def results_flow(reports: Path, domains: list[str]) -> dict[str, float]:
    return task(write_results)(reports, domains)
