"""The tool faults section: the scripted expert in TravelEnv at tool fault rates 0 to 0.9."""

from __future__ import annotations

from typing import Any

from bench.fault_harness.corpus import Corpus
from star.train.process import call_breakdown, call_kinds
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert


def tool_faults(corpus: Corpus, rates: tuple[float, ...] = (0.0, 0.1, 0.3, 0.6, 0.9), episodes: int = 40, max_turns: int = 16) -> dict[str, Any]:
    """The scripted expert as the policy, at each tool fault rate, with the env's turn limit."""
    teacher = ExpertTeacher(Expert())
    queries = (corpus.queries * (episodes // max(len(corpus.queries), 1) + 1))[:episodes]
    out = {}
    for rate in rates:
        totals = dict(episodes=0, completed=0, success=0, calls=0, faults=0, recoveries=0)
        for sample, query in enumerate(queries):
            row = run_episode(teacher, corpus.tools, corpus.index, query, sample, seed=0, max_turns=max_turns, fault_rate=rate)
            kinds = call_kinds(row["calls"])
            faults = kinds.count("fault")
            totals["episodes"] += 1
            totals["completed"] += row["answer"] is not None and not row["truncated"]
            totals["success"] += row["success"]
            totals["calls"] += len(kinds)
            totals["faults"] += faults
            totals["recoveries"] += round(call_breakdown(kinds)["recovery_rate"] * faults)
        totals["completion_rate"] = totals["completed"] / totals["episodes"]
        totals["success_rate"] = totals["success"] / totals["episodes"]
        totals["observed_fault_rate"] = totals["faults"] / max(totals["calls"], 1)
        totals["recovery_rate"] = totals["recoveries"] / totals["faults"] if totals["faults"] else None
        out[str(rate)] = totals
        print(
            f"tool faults {rate:.1f}: {totals['completed']}/{totals['episodes']} completed, {totals['success']} passed, "
            f"{totals['faults']} faults in {totals['calls']} calls, {totals['recoveries']} recovered"
        )
    return out
