"""world: build a domain's world (the sandbox, the passage corpus and its index) and save it."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.domain import Domain


@flow(name="world")
def world_flow(domain: Domain, out: Path) -> dict[str, float]:
    return task(domain.build_world, name="build_world")(out)
