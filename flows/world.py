"""world: build the sandbox (synthetic or the TravelPlanner DB) and save it as parquet."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import WorldParams
from star.travel.sandbox import Sandbox, load_travelplanner
from star.travel.synthetic import generate_world


@task
def build_sandbox(params: WorldParams) -> Sandbox:
    if params.source == "travelplanner":
        return load_travelplanner(params.database)
    return generate_world(params.synthetic)


@task
def save_sandbox(sandbox: Sandbox, out: Path) -> dict[str, int]:
    sandbox.save(out)
    counts = {f"rows_{name}": frame.height for name, frame in sandbox.tables().items()}
    counts["states"] = len(sandbox.states())
    return counts


@flow(name="world")
def world_flow(world: WorldParams, out: Path = Path("data/world")) -> dict[str, int]:
    return save_sandbox(build_sandbox(world), out)
