from pathlib import Path

from flows.world import world_flow
from stages.common import run_stage

if __name__ == "__main__":
    run_stage("world", ["world"], world_flow, out=Path("data/world"))
