"""`python -m stages.distill [DOMAIN]`: the domain's teacher on its training tasks (travel by default)."""

from flows.distill import distill_flow
from stages.common import PROGRESS, domain_argument, run_stage
from star.sections import layout

if __name__ == "__main__":
    domain = domain_argument()
    where = layout(domain)
    run_stage(
        f"{where.prefix}distill", ["runner"], distill_flow, domain=domain,
        tasks=where.tasks / "train.jsonl", out=where.trajectories, store=PROGRESS / f"{where.prefix}distill",
    )
