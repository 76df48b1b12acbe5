import json
from pathlib import Path

from flows.results import results_flow
from stages.common import PARAMS_FILE, run_stage
from star.config import SECTIONS, load_params
from star.tracking import log_pipeline_summary

POLICIES = ["base", "sft", "grpo", "teacher"]
QA_POLICIES = ["qa_base", "qa_sft", "qa_grpo", "naive_rag", "base_tool_call", "travel_base", "travel_sft", "travel_grpo", "qa_teacher"]

if __name__ == "__main__":
    reports = Path("reports")
    run_stage(
        "results",
        [],
        results_flow,
        artifacts=[reports / "results.json", reports / "results.md", reports / "pass_rates.png", reports / "qa_em.png"],
        reports=reports,
        policies=POLICIES,
        qa_policies=QA_POLICIES,
        comparisons={
            "travel grpo - sft final_pass": ("travel", reports / "grpo/rows.jsonl", reports / "sft/rows.jsonl"),
            "travel sft - base final_pass": ("travel", reports / "sft/rows.jsonl", reports / "base/rows.jsonl"),
            "qa grpo - sft em": ("qa", Path("data/qa/infer/qa_grpo/trajectories.jsonl"), Path("data/qa/infer/qa_sft/trajectories.jsonl")),
            "qa sft - naive_rag em": ("qa", Path("data/qa/infer/qa_sft/trajectories.jsonl"), Path("data/qa/infer/naive_rag/trajectories.jsonl")),
            "qa sft - base_tool_call em": ("qa", Path("data/qa/infer/qa_sft/trajectories.jsonl"), Path("data/qa/infer/base_tool_call/trajectories.jsonl")),
            # The alignment tax with its CI: QA exact match after travel training minus before.
            "qa travel_sft - travel_base em": ("qa", Path("data/qa/infer/travel_sft/trajectories.jsonl"), Path("data/qa/infer/travel_base/trajectories.jsonl")),
            "qa travel_grpo - travel_base em": ("qa", Path("data/qa/infer/travel_grpo/trajectories.jsonl"), Path("data/qa/infer/travel_base/trajectories.jsonl")),
        },
    )
    # The parent run carries the whole configuration and the final metrics, for MLflow's compare view.
    results = json.loads((reports / "results.json").read_text())
    finals = {**results["travel"], **results["qa"]}
    # Validated like the stages' own params, so the same value is the same string everywhere.
    params = {name: section.model_dump(mode="json") for name, section in load_params(PARAMS_FILE, list(SECTIONS)).items()}
    log_pipeline_summary(Path.cwd(), params, finals)
