from pathlib import Path

from flows.report import report_flow
from stages.common import run_stage

if __name__ == "__main__":
    out = Path("reports/compare")
    run_stage("report", [], report_flow, artifacts=[out / "report.md", out / "report.csv", out / "pass_rates.png", out / "grpo_curves.png"], out=out)
