"""Side-by-side results of every policy: one JSON, a markdown table, a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from star.plots import grouped_bars
from star.travel.evaluation.arguments import SLOTS
from star.travel.evaluation.metrics import METRICS
from star.travel.specs import LEVELS

# teacher is the upper reference, base the lower one
POLICY_ORDER = ("teacher", "grpo", "sft", "base")


def flat_metrics(aggregate: dict[str, Any]) -> dict[str, float]:
    """`aggregate()` output as flat keys: final_pass_rate, easy/final_pass_rate, ..."""
    out = {m: aggregate[m] for m in METRICS}
    out["n"] = aggregate.get("n", 0)
    for level, rates in aggregate.get("by_level", {}).items():
        for m in METRICS:
            out[f"{level}/{m}"] = rates[m]
    return out


def ordered(results: dict[str, dict[str, float]]) -> list[str]:
    return sorted(results, key=lambda p: (POLICY_ORDER.index(p) if p in POLICY_ORDER else len(POLICY_ORDER), p))


def markdown_table(results: dict[str, dict[str, float]]) -> str:
    policies = ordered(results)
    names = {
        "delivery_rate": "delivery",
        "commonsense_micro": "commonsense micro",
        "commonsense_macro": "commonsense macro",
        "hard_micro": "hard micro",
        "hard_macro": "hard macro",
        "final_pass_rate": "final pass",
    }
    lines = ["| metric | " + " | ".join(policies) + " |", "|---|" + "---:|" * len(policies)]
    per_level = ("delivery_rate", "final_pass_rate")  # the rest is in metrics.json
    for scope in ("", *LEVELS):
        for metric in METRICS if not scope else per_level:
            key = f"{scope}/{metric}" if scope else metric
            if not any(key in results[p] for p in policies):
                continue
            label = f"{scope} {names[metric]}" if scope else f"**{names[metric]}**"
            cells = [f"{100 * results[p][key]:.1f}%" if key in results[p] else "-" for p in policies]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def arguments_table(arguments: dict[str, dict[str, float]]) -> str:
    """Per slot and policy: arguments right on the test queries, and on their counterfactual copies."""
    policies = ordered(arguments)
    slots = [s for s in (*SLOTS, "all") if any(f"args/{s}" in arguments[p] for p in policies)]
    head = "| slot | " + " | ".join(f"{p} test | {p} counterfactual" for p in policies) + " |"
    lines = [head, "|---|" + "---:|---:|" * len(policies)]
    for slot in [*slots, "stale"]:
        cells = [f"{100 * arguments[p][k]:.1f}%" if k in arguments[p] else "-" for p in policies for k in (f"args/{slot}", f"counterfactual/{slot}")]
        lines.append(f"| {'stale (old value kept)' if slot == 'stale' else slot} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_pass_rates(results: dict[str, dict[str, float]], path: str | Path) -> None:
    """Grouped bars: final pass rate per level (and overall) for each policy."""
    scopes = ["overall", *LEVELS]
    series = {p: [results[p].get("final_pass_rate" if s == "overall" else f"{s}/final_pass_rate", 0.0) for s in scopes] for p in ordered(results)}
    grouped_bars(scopes, series, path, ylabel="final pass rate (%)", title="TravelPlanner final pass rate by level")


def item_scores(rows_path: str | Path) -> dict[int, float]:
    """Final pass (0 or 1) per query, from an evaluate stage's rows.jsonl."""
    from star.io import read_jsonl

    return {row["idx"]: float(row["final_pass"]) for row in read_jsonl(rows_path)}


POLICIES = ["base", "sft", "grpo", "teacher"]
PLOTS = ["pass_rates.png"]


def summarize(where: Any, reports: Path) -> Any:
    """Travel's part of the results (star/results.py): the policies' metrics and tool-call arguments, the gains of training."""
    from star.results import DomainResults, collect

    results, arguments = collect(where.reports, POLICIES), collect(where.reports, POLICIES, "arguments.json")
    text = "## TravelPlanner\n\n" + markdown_table(results)
    if arguments:
        text += "\n## Travel tool-call arguments taken from the query\n\n" + arguments_table(arguments)
    plot_pass_rates(results, reports / PLOTS[0])
    rows = {p: where.reports / p / "rows.jsonl" for p in POLICIES}
    return DomainResults(
        results, text, {f"{p}/final_pass_rate": m["final_pass_rate"] for p, m in results.items()}, item_scores,
        comparisons={"travel grpo - sft final_pass": (rows["grpo"], rows["sft"]), "travel sft - base final_pass": (rows["sft"], rows["base"])},
        extras={"arguments": arguments},
    )
