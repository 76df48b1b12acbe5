"""`python -m stages.world [DOMAIN]`: the domain's world (travel by default)."""

from flows.world import world_flow
from stages.common import domain_argument, run_stage
from star.sections import layout

if __name__ == "__main__":
    domain = domain_argument()
    where = layout(domain)
    run_stage(f"{where.prefix}world", [], world_flow, domain=domain, check_inputs="world", out=where.world)
