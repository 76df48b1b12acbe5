import sys
from pathlib import Path

from flows.synthesize import synthesize_flow
from stages.common import PARAMS_FILE, run_stage
from star.config import ParamsError, load_params
from star.travel.official import OfficialQueriesError, read_official_queries


def read_official_file() -> None:
    """With `source: official`, read the published query file before any work (run_stage reports bad params)."""
    try:
        params = load_params(Path(PARAMS_FILE), ["synthesize"])["synthesize"]
    except ParamsError:
        return
    if params.source == "official":
        read_official_queries(params.path)


if __name__ == "__main__":
    try:
        read_official_file()
        run_stage("synthesize", ["synthesize", "env"], synthesize_flow, world=Path("data/world"), out=Path("data/queries"))
    except OfficialQueriesError as exc:  # a missing or malformed query file: one line, as for bad params
        print(f"error: synthesize: {exc}", file=sys.stderr)
        sys.exit(2)
