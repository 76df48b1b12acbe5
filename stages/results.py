from pathlib import Path

from flows.results import results_flow
from stages.common import run_stage

POLICIES = ["base", "sft", "grpo", "teacher"]

if __name__ == "__main__":
    reports = Path("reports")
    run_stage(
        "results",
        [],
        results_flow,
        artifacts=[reports / "results.json", reports / "results.md", reports / "pass_rates.png"],
        reports=reports,
        policies=POLICIES,
    )
