from pathlib import Path

from flows.distill import distill_flow
from stages.common import run_stage

if __name__ == "__main__":
    run_stage(
        "distill",
        ["teacher", "env", "runner"],
        distill_flow,
        world=Path("data/world"),
        queries=Path("data/queries/train.jsonl"),
        out=Path("data/trajectories"),
        progress_dir=Path("data/.progress"),
    )
