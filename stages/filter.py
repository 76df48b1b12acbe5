from pathlib import Path

from flows.filter import filter_flow
from stages.common import run_stage

if __name__ == "__main__":
    run_stage(
        "filter",
        ["filter", "model"],
        filter_flow,
        trajectories=Path("data/trajectories/trajectories.jsonl"),
        base=Path("models/base"),
        world=Path("data/world"),
        out=Path("data/sft"),
    )
