"""`python -m stages.synthesize [DOMAIN]`: the domain's task splits (travel by default)."""

from flows.synthesize import synthesize_flow
from stages.common import domain_argument, run_stage
from star.sections import layout

if __name__ == "__main__":
    domain = domain_argument()
    where = layout(domain)
    run_stage(f"{where.prefix}synthesize", [], synthesize_flow, domain=domain, check_inputs="synthesize", out=where.tasks)
