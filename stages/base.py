from pathlib import Path

from flows.base import base_flow
from stages.common import run_stage

if __name__ == "__main__":
    run_stage(
        "base",
        ["model"],
        base_flow,
        world=Path("data/world"),
        trajectories=Path("data/trajectories/trajectories.jsonl"),
        out=Path("models/base"),
    )
