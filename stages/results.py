import json
from pathlib import Path

from flows.results import results_flow
from stages.common import PARAMS_FILE, run_stage
from star.config import SECTIONS, load_params
from star.results import plots
from star.sections import DOMAINS
from star.tracking import log_pipeline_summary

if __name__ == "__main__":
    reports = Path("reports")
    run_stage(
        "results", [], results_flow,
        artifacts=[reports / "results.json", reports / "results.md", *(reports / plot for plot in plots(DOMAINS))],
        reports=reports, domains=list(DOMAINS),
    )
    # The parent run carries the whole configuration and the final metrics, for MLflow's compare view.
    results = json.loads((reports / "results.json").read_text())
    finals = {policy: metrics for domain in DOMAINS for policy, metrics in results[domain].items()}
    # Validated like the stages' own params, so the same value is the same string everywhere.
    params = {name: section.model_dump(mode="json") for name, section in load_params(PARAMS_FILE, list(SECTIONS)).items()}
    log_pipeline_summary(Path.cwd(), params, finals)
