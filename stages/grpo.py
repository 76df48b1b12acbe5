from pathlib import Path

from flows.grpo import grpo_flow, train
from stages.common import run_stage

if __name__ == "__main__":
    run_stage(
        "grpo",
        ["grpo", "env", "model"],
        grpo_flow,
        replica=train,  # the other processes under `accelerate launch`
        world=Path("data/world"),
        queries=Path("data/queries/train.jsonl"),
        sft_set=Path("data/sft/train.jsonl"),
        sft=Path("models/sft"),
        out=Path("models/grpo"),
        checkpoints=Path("models/.checkpoints/grpo"),
        curve=Path("reports/train/grpo.csv"),
    )
