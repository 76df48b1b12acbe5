"""`python -m stages.sft [DOMAIN]`: SFT of the domain's copy-pretrained base on its SFT set (travel by default)."""

from pathlib import Path

from flows.sft import sft_flow, train
from stages.common import domain_argument, run_stage
from star.sections import layout

if __name__ == "__main__":
    where = layout(domain_argument())
    run_stage(
        f"{where.prefix}sft", ["sft", "model"], sft_flow,
        replica=train,  # the other processes under `accelerate launch`
        data=where.sft / "train.jsonl", base=where.models / "copy", out=where.models / "sft",
        # checkpoints live outside the stage output, so an interrupted run resumes
        checkpoints=Path("models/.checkpoints") / f"{where.prefix}sft", curve=Path(f"reports/train/{where.prefix}sft.csv"),
    )
