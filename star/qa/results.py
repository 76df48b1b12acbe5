"""QA results side by side: the trained agent, the baselines, the expert, and the
travel agent out of its domain (the alignment tax)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from star.plots import grouped_bars

ROLES = {
    "qa_teacher": "expert (reference)",
    "qa_grpo": "QA agent, GRPO",
    "qa_sft": "QA agent, SFT",
    "naive_rag": "baseline: Naive RAG",
    "base_tool_call": "baseline: Base Tool Call",
    "qa_base": "QA agent, untrained",
    "travel_base": "travel agent, untrained",
    "travel_sft": "travel agent, SFT",
    "travel_grpo": "travel agent, GRPO",
    "travel_base_naive_rag": "travel agent, untrained, Naive RAG prompt",
    "travel_sft_naive_rag": "travel agent, SFT, Naive RAG prompt",
    "travel_grpo_naive_rag": "travel agent, GRPO, Naive RAG prompt",
}
# The travel agent is asked with the QA agent's prompt and with Naive RAG's, where an untrained model that
# cannot follow the agent's tags still answers: the alignment tax on each.
TAX_PROMPTS = ("", "_naive_rag")


def ordered(results: dict[str, dict[str, float]]) -> list[str]:
    order = list(ROLES)
    return sorted(results, key=lambda p: (order.index(p) if p in order else len(order), p))


def tax_pairs() -> list[tuple[str, str]]:
    """(trained, untrained) travel agents, on each prompt."""
    return [(f"travel_{p}{prompt}", f"travel_base{prompt}") for prompt in TAX_PROMPTS for p in ("sft", "grpo")]


def alignment_tax(results: dict[str, dict[str, float]]) -> dict[str, float]:
    """QA exact match lost by the travel agent as its travel training grows (untrained minus trained), on each prompt."""
    return {
        "alignment_tax_" + trained.removeprefix("travel_"): results[base]["em"] - results[trained]["em"]
        for trained, base in tax_pairs()
        if trained in results and base in results
    }


def markdown_table(results: dict[str, dict[str, float]]) -> str:
    hops = sorted({k.split("/")[0] for m in results.values() for k in m if k.endswith("hop/em")})
    lines = ["| policy | role | EM | F1 | " + " | ".join(f"{h} EM" for h in hops) + " |", "|---|---|---:|---:|" + "---:|" * len(hops)]
    for policy in ordered(results):
        m = results[policy]
        cells = [f"{100 * m.get('em', 0):.1f}%", f"{100 * m.get('f1', 0):.1f}%"] + [f"{100 * m[f'{h}/em']:.1f}%" if f"{h}/em" in m else "-" for h in hops]
        lines.append(f"| {policy} | {ROLES.get(policy, '')} | " + " | ".join(cells) + " |")
    tax = alignment_tax(results)
    if tax:
        lines.append("")
        lines.append("Alignment tax (QA EM of the untrained travel agent minus the trained one): " + ", ".join(f"{k.removeprefix('alignment_tax_')} {100 * v:+.1f} points" for k, v in tax.items()))
    return "\n".join(lines) + "\n"


def plot_em(results: dict[str, dict[str, float]], path: str | Path) -> None:
    """Bars: EM and F1 for each policy."""
    policies = ordered(results)
    series = {m.upper(): [results[p].get(m, 0) for p in policies] for m in ("em", "f1")}
    grouped_bars(policies, series, path, ylabel="%", title="Multi-hop QA on the held-out questions", figsize=(8, 3.5), rotate=True)


def item_scores(trajectories_path: str | Path) -> dict[int, float]:
    """Exact match per question, from a qa_infer stage's trajectories.jsonl."""
    from star.io import read_jsonl

    return {row["query_id"]: float(row["evaluation"]["em"]) for row in read_jsonl(trajectories_path)}


POLICIES = [
    "qa_base", "qa_sft", "qa_grpo", "naive_rag", "base_tool_call", "travel_base", "travel_sft", "travel_grpo",
    "travel_base_naive_rag", "travel_sft_naive_rag", "travel_grpo_naive_rag", "qa_teacher",
]
PLOTS = ["qa_em.png"]


def summarize(where: Any, reports: Path) -> Any:
    """QA's part of the results (star/results.py): the agent, the baselines, the expert and the travel agent, with the
    gains of training over the baselines, and the alignment tax with its CI."""
    from star.results import DomainResults, collect

    results = collect(where.reports, POLICIES)
    text = ""
    if results:
        text = "\n## Multi-hop QA\n\n" + markdown_table(results)
        plot_em(results, reports / PLOTS[0])
    trajectories = {p: where.infer / p / "trajectories.jsonl" for p in POLICIES}
    pairs = [("qa_grpo", "qa_sft"), ("qa_sft", "naive_rag"), ("qa_sft", "base_tool_call"), *tax_pairs()]
    tax = alignment_tax(results)
    metrics = {f"{p}/{m}": v[m] for m in ("em", "f1") for p, v in results.items()}
    return DomainResults(
        results, text, {**metrics, **tax}, item_scores,
        # qa grpo - sft em, ..., and the alignment tax with its CI: QA exact match after travel training minus before
        comparisons={f"qa {a.removeprefix('qa_')} - {b.removeprefix('qa_')} em": (trajectories[a], trajectories[b]) for a, b in pairs},
        extras=tax,
    )
