from pathlib import Path

from flows.sft import sft_flow, train
from stages.common import run_stage

if __name__ == "__main__":
    run_stage(
        "sft",
        ["sft", "model"],
        sft_flow,
        replica=train,  # the other processes under `accelerate launch`
        data=Path("data/sft/train.jsonl"),
        base=Path("models/copy"),
        out=Path("models/sft"),
        # checkpoints live outside the stage output, so an interrupted run resumes
        checkpoints=Path("models/.checkpoints/sft"),
        curve=Path("reports/train/sft.csv"),
    )
