from pathlib import Path

from flows.synthesize import synthesize_flow
from stages.common import run_stage

if __name__ == "__main__":
    run_stage("synthesize", ["synthesize", "env"], synthesize_flow, world=Path("data/world"), out=Path("data/queries"))
