"""`python -m stages.filter [DOMAIN]`: the domain's SFT set (travel by default)."""

from flows.filter import filter_flow
from stages.common import domain_argument, run_stage
from star.sections import layout

if __name__ == "__main__":
    domain = domain_argument()
    where = layout(domain)
    run_stage(
        f"{where.prefix}filter", ["model"], filter_flow, domain=domain,
        trajectories=where.trajectories / "trajectories.jsonl", base=where.models / "base", out=where.sft,
    )
