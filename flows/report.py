"""report: every pipeline run in the MLflow store compared, as markdown, JSON, CSV and plots."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from star.report import load_runs, write_report
from star.tracking import tracking_uri


@flow(name="report")
def report_flow(out: Path) -> dict[str, float]:
    runs = load_runs(tracking_uri(Path.cwd()))
    paths = write_report(runs, out)  # every domain's trained policies; the report's own CLI can show any others
    return {"runs": len(runs), "files": len(paths)}
