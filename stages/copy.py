"""`python -m stages.copy [DOMAIN]`: copy pretraining of the domain's base model (travel by default)."""

from pathlib import Path

from flows.copy import copy_flow
from stages.common import domain_argument, run_stage
from star.sections import layout

if __name__ == "__main__":
    where = layout(domain_argument())
    run_stage(
        f"{where.prefix}copy", ["copy_pretrain", "model"], copy_flow,
        base=where.models / "base", out=where.models / "copy", checkpoints=Path("models/.checkpoints") / f"{where.prefix}copy",
    )
