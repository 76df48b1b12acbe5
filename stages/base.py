"""`python -m stages.base [DOMAIN]`: the domain's untrained policy (travel by default)."""

from flows.base import base_flow
from stages.common import domain_argument, run_stage
from star.sections import layout

if __name__ == "__main__":
    domain = domain_argument()
    where = layout(domain)
    run_stage(
        f"{where.prefix}base", ["model"], base_flow, domain=domain,
        trajectories=where.trajectories / "trajectories.jsonl", out=where.models / "base",
    )
