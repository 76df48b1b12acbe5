import sys
from pathlib import Path

from flows.infer import infer_flow, infer_teacher_flow
from stages.common import run_stage

if __name__ == "__main__":
    policy = sys.argv[1]
    common = dict(world=Path("data/world"), queries=Path("data/queries/test.jsonl"), out=Path(f"data/infer/{policy}"))
    if policy == "teacher":
        run_stage("infer_teacher", ["teacher", "env"], infer_teacher_flow, **common)
    else:
        run_stage(
            f"infer@{policy}", ["infer", "env", "model", "runner"], infer_flow,
            policy=policy, model_dir=Path(f"models/{policy}"), progress_dir=Path("data/.progress"), **common,
        )
