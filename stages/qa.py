"""The QA domain's stages: `python -m stages.qa STAGE [POLICY]` (see dvc.yaml)."""

import sys
from pathlib import Path

from flows import qa
from stages.common import run_stage

CORPUS, QUESTIONS = Path("data/qa/corpus"), Path("data/qa/questions")
# The model each QA policy runs; the baselines run the untrained base model.
MODELS = {
    "qa_base": "models/qa/base",
    "qa_sft": "models/qa/sft",
    "qa_grpo": "models/qa/grpo",
    "naive_rag": "models/qa/base",
    "base_tool_call": "models/qa/base",
    "travel_base": "models/base",
    "travel_sft": "models/sft",
    "travel_grpo": "models/grpo",
}

if __name__ == "__main__":
    stage, policy = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    if stage == "world":
        run_stage("qa_world", ["qa"], qa.qa_world_flow, out=CORPUS)
    elif stage == "synthesize":
        run_stage("qa_synthesize", ["qa"], qa.qa_synthesize_flow, corpus=CORPUS, out=QUESTIONS)
    elif stage == "distill":
        run_stage(
            "qa_distill", ["qa", "runner"], qa.qa_distill_flow, corpus=CORPUS, questions=QUESTIONS / "train.jsonl",
            out=Path("data/qa/trajectories"), progress_dir=Path("data/.progress"),
        )
    elif stage == "base":
        run_stage("qa_base", ["model"], qa.qa_base_flow, corpus=CORPUS, trajectories=Path("data/qa/trajectories/trajectories.jsonl"), out=Path(MODELS["qa_base"]))
    elif stage == "filter":
        run_stage("qa_filter", ["qa", "model"], qa.qa_filter_flow, trajectories=Path("data/qa/trajectories"), base=Path(MODELS["qa_base"]), out=Path("data/qa/sft"))
    elif stage == "sft":
        from flows.sft import sft_flow, train

        run_stage(
            "qa_sft", ["sft", "model"], sft_flow, replica=train, data=Path("data/qa/sft/train.jsonl"), base=Path("models/qa/copy"),
            out=Path(MODELS["qa_sft"]), checkpoints=Path("models/.checkpoints/qa_sft"), curve=Path("reports/train/qa_sft.csv"),
        )
    elif stage == "grpo":
        run_stage(
            "qa_grpo", ["grpo", "env", "qa", "model"], qa.qa_grpo_flow, replica=qa.qa_grpo_flow.fn, corpus=CORPUS, questions=QUESTIONS / "train.jsonl",
            sft=Path(MODELS["qa_sft"]), out=Path(MODELS["qa_grpo"]), checkpoints=Path("models/.checkpoints/qa_grpo"), curve=Path("reports/train/qa_grpo.csv"),
        )
    elif stage == "infer":
        run_stage(
            "qa_infer_teacher" if policy == "qa_teacher" else f"qa_infer@{policy}", ["infer", "qa", "model", "runner"], qa.qa_infer_flow,
            policy=policy, corpus=CORPUS, questions=QUESTIONS / "test.jsonl", model_dir=Path(MODELS[policy]) if policy in MODELS else None,
            out=Path(f"data/qa/infer/{policy}"), report=Path(f"reports/qa/{policy}"), progress_dir=Path("data/.progress"),
        )
    else:
        sys.exit(f"error: unknown QA stage {stage!r}")
