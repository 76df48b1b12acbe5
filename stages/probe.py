import sys
from pathlib import Path

from flows.probe import probe_flow
from stages.common import run_stage

if __name__ == "__main__":
    policy = sys.argv[1]
    out = Path(f"reports/{policy}")
    run_stage(
        f"probe@{policy}",
        ["infer", "env", "model"],
        probe_flow,
        artifacts=[out / "arguments.csv"],
        policy=policy,
        world=Path("data/world"),
        train=Path("data/queries/train.jsonl"),
        queries=Path("data/queries/test.jsonl"),
        played=Path(f"data/infer/{policy}"),
        model_dir=Path(f"models/{policy}"),
        out=out,
    )
