"""Every policy of both domains side by side: results.json, results.md, the plots and the paired gains."""

from __future__ import annotations

import json
from pathlib import Path

from star.io import write_json, write_text
from star.qa import results as qa_results
from star.stats import gains_table, paired_bootstrap
from star.travel import results as travel_results


def collect(reports: Path, policies: list[str], name: str = "metrics.json") -> dict[str, dict[str, float]]:
    """Each policy's `reports/POLICY/name`, where it exists."""
    results = {}
    for policy in policies:
        path = reports / policy / name
        if path.exists():
            results[policy] = json.loads(path.read_text())
    return results


def paired_gains(comparisons: dict[str, tuple[str, Path, Path]]) -> dict[str, dict[str, float]]:
    """Each (domain, after, before) comparison's per-item gain with a paired bootstrap CI, where both files exist."""
    readers = {"travel": travel_results.item_scores, "qa": qa_results.item_scores}
    out = {}
    for name, (domain, after, before) in comparisons.items():
        if after.exists() and before.exists():
            out[name] = paired_bootstrap(readers[domain](after), readers[domain](before))
    return out


def write_results(reports: Path, policies: list[str], qa_policies: list[str], comparisons: dict[str, tuple[str, Path, Path]]) -> dict[str, float]:
    """Write reports/results.{json,md}, pass_rates.png and qa_em.png; the final metrics."""
    travel, qa = collect(reports, policies), collect(reports / "qa", qa_policies)
    gains, arguments = paired_gains(comparisons), collect(reports, policies, "arguments.json")
    write_json(reports / "results.json", {"travel": travel, "qa": qa, "gains": gains, "arguments": arguments, **qa_results.alignment_tax(qa)})
    text = "## TravelPlanner\n\n" + travel_results.markdown_table(travel)
    if arguments:
        text += "\n## Travel tool-call arguments taken from the query\n\n" + travel_results.arguments_table(arguments)
    if qa:
        text += "\n## Multi-hop QA\n\n" + qa_results.markdown_table(qa)
        qa_results.plot_em(qa, reports / "qa_em.png")
    if gains:
        text += "\n## Paired gains on the test split (bootstrap over items)\n\n" + gains_table(gains)
    write_text(reports / "results.md", text)
    travel_results.plot_pass_rates(travel, reports / "pass_rates.png")
    metrics = {f"{p}/final_pass_rate": m["final_pass_rate"] for p, m in travel.items()}
    metrics.update({f"{p}/em": m["em"] for p, m in qa.items()})
    metrics.update({f"{p}/f1": m["f1"] for p, m in qa.items()})
    metrics.update({f"gain/{name}": g["gain"] for name, g in gains.items()})
    return {**metrics, **qa_results.alignment_tax(qa)}
