import sys
from pathlib import Path

from flows.copy import copy_flow
from stages.common import run_stage

# `python -m stages.copy [qa]`: the travel or the QA base model
if __name__ == "__main__":
    qa = sys.argv[1:] == ["qa"]
    models = Path("models/qa" if qa else "models")
    run_stage(
        "qa_copy" if qa else "copy", ["copy_pretrain", "model"], copy_flow,
        base=models / "base", out=models / "copy", checkpoints=Path("models/.checkpoints") / ("qa_copy" if qa else "copy"),
    )
