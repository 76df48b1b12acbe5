import sys
from pathlib import Path

from flows.travel.evaluate import format_flow
from stages.common import run_stage
from star.travel.plans.format_check import SubmissionFormatError

if __name__ == "__main__":
    policy = sys.argv[1]
    try:
        run_stage(
            f"format@{policy}",
            ["format"],
            format_flow,
            queries=Path("data/queries/test.jsonl"),
            trajectories=Path(f"data/infer/{policy}/trajectories.jsonl"),
            out=Path(f"data/plans/{policy}.jsonl"),
        )
    except SubmissionFormatError as exc:  # nothing was written; the formatter needs fixing
        print(f"error: format@{policy}: {exc}", file=sys.stderr)
        sys.exit(1)
