import sys
from pathlib import Path

from flows.travel.evaluate import evaluate_flow
from stages.common import run_stage

if __name__ == "__main__":
    policy = sys.argv[1]
    out = Path(f"reports/{policy}")
    run_stage(
        f"evaluate@{policy}",
        ["evaluate"],
        evaluate_flow,
        artifacts=[out / "metrics.json", out / "summary.json"],
        world=Path("data/world"),
        queries=Path("data/queries/test.jsonl"),
        plans=Path(f"data/plans/{policy}.jsonl"),
        out=out,
    )
