"""synthesize: compose a domain's tasks over its world, split train / validation / test."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.domain import Domain


@flow(name="synthesize")
def synthesize_flow(domain: Domain, out: Path) -> dict[str, float]:
    return task(domain.synthesize, name="compose_tasks")(out)
