"""Every policy of every domain side by side: results.json, results.md, the plots and the paired gains.

Each registered domain's `star.<name>.results` module contributes its part (`summarize`): its
policies' metrics, its section of results.md, its plots, and the comparisons whose paired gains
are computed here, over items, with a bootstrap CI.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from star.io import write_json, write_text
from star.sections import layout
from star.stats import gains_table, paired_bootstrap


@dataclass
class DomainResults:
    """One domain's part of the results."""

    results: dict[str, dict[str, float]]  # policy -> its metrics, under the domain's name in results.json
    markdown: str  # its section of results.md
    metrics: dict[str, float]  # logged by the stage
    item_scores: Callable[[Path], dict]  # item -> score, from a file of `comparisons`
    comparisons: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # name -> (after, before) item files
    extras: dict = field(default_factory=dict)  # further top-level keys of results.json, after the gains


def collect(reports: Path, policies: Sequence[str], name: str = "metrics.json") -> dict[str, dict[str, float]]:
    """Each policy's `reports/POLICY/name`, where it exists."""
    results = {}
    for policy in policies:
        path = reports / policy / name
        if path.exists():
            results[policy] = json.loads(path.read_text())
    return results


def domain_part(domain: str) -> ModuleType:
    """The module with a domain's part of the results."""
    return importlib.import_module(f"star.{domain}.results")


def plots(domains: Sequence[str]) -> list[str]:
    """The files the domains' parts plot, under reports/."""
    return [name for d in domains for name in domain_part(d).PLOTS]


def write_results(reports: Path, domains: Sequence[str]) -> dict[str, float]:
    """Write reports/results.{json,md} and each domain's plots; the final metrics."""
    parts = {d: domain_part(d).summarize(layout(d), reports) for d in domains}
    gains = {
        name: paired_bootstrap(part.item_scores(after), part.item_scores(before))
        for part in parts.values()
        for name, (after, before) in part.comparisons.items()
        if after.exists() and before.exists()
    }
    extras = {k: v for part in parts.values() for k, v in part.extras.items()}
    write_json(reports / "results.json", {**{d: part.results for d, part in parts.items()}, "gains": gains, **extras})
    text = "".join(part.markdown for part in parts.values())
    if gains:
        text += "\n## Paired gains on the test split (bootstrap over items)\n\n" + gains_table(gains)
    write_text(reports / "results.md", text)
    metrics = {k: v for part in parts.values() for k, v in part.metrics.items()}
    return {**metrics, **{f"gain/{name}": g["gain"] for name, g in gains.items()}}
