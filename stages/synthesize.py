"""`python -m stages.synthesize [DOMAIN]`: the domain's task splits (travel by default)."""

import sys
from pathlib import Path

from flows.synthesize import synthesize_flow
from stages.common import PARAMS_FILE, domain_argument, run_stage
from star.config import ParamsError, load_params
from star.sections import layout


def read_official_file() -> None:
    """With travel's `source: official`, read the published query file before any work (run_stage reports bad params)."""
    from star.travel.world.official import read_official_queries

    try:
        params = load_params(Path(PARAMS_FILE), ["synthesize"])["synthesize"]
    except ParamsError:
        return
    if params.source == "official":
        read_official_queries(params.path)


if __name__ == "__main__":
    domain = domain_argument()
    where = layout(domain)
    if domain == "travel":
        from star.travel.world.official import OfficialQueriesError

        try:
            read_official_file()
            run_stage("synthesize", [], synthesize_flow, domain=domain, out=where.tasks)
        except OfficialQueriesError as exc:  # a missing or malformed query file: one line, as for bad params
            print(f"error: synthesize: {exc}", file=sys.stderr)
            sys.exit(2)
    else:
        run_stage(f"{where.prefix}synthesize", [], synthesize_flow, domain=domain, check_inputs=True, out=where.tasks)
