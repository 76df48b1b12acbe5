"""Fault tolerance: garbled model output, failing servers, failing tools, leaked secrets, killed stages.

The command line of bench/faults.py: which sections run, at what size; their figures end in one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.fault_harness.corpus import build_corpus
from bench.fault_harness.fuzz import fuzz
from bench.fault_harness.kills import KILL_STAGES, kills
from bench.fault_harness.leaks import secrets
from bench.fault_harness.servers import servers
from bench.fault_harness.tool_faults import tool_faults

SECTIONS = ("fuzz", "servers", "tool_faults", "secrets", "kills")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="fuzz 100,000, 10 kills and the real distill stage (up to 25 minutes)")
    parser.add_argument("--fuzz", type=int, default=None, help="fuzz inputs (default 10,000; 100,000 with --full)")
    parser.add_argument("--kills", type=int, default=None, help="kill -9 trials (default 0; 10 with --full)")
    parser.add_argument("--kill-stages", default=",".join(KILL_STAGES), help=f"comma-separated stages the kills go to, in turn (default: {','.join(KILL_STAGES)})")
    parser.add_argument("--kill-budget", type=float, default=25.0, help="minutes for the kills section, reference runs included; no new kill starts after that (default 25)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections to run (default: all of {','.join(SECTIONS)})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n_fuzz = args.fuzz if args.fuzz is not None else (100_000 if args.full else 10_000)
    n_kills = args.kills if args.kills is not None else (10 if args.full else 0)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    kill_stages = tuple(x.strip() for x in args.kill_stages.split(",") if x.strip())
    if unknown := set(only) - set(SECTIONS):
        parser.error(f"unknown section(s) {sorted(unknown)}; choose from {','.join(SECTIONS)}")
    if not kill_stages or (unknown := set(kill_stages) - set(KILL_STAGES)):
        parser.error(f"--kill-stages: choose from {','.join(KILL_STAGES)}")

    start = time.perf_counter()
    summary: dict[str, Any] = {}
    if set(only) - {"kills"}:
        corpus = build_corpus(seed=args.seed)
        print(f"corpus: {len(corpus.travel_calls)} travel calls, {len(corpus.travel_answers)} answers, {len(corpus.qa_calls)} QA calls ({time.perf_counter() - start:.1f} s)")
    if "fuzz" in only:
        fuzzed = fuzz(corpus, n_fuzz, args.seed)
        summary.update(
            fuzz_inputs=fuzzed["inputs"],
            fuzz_crashes=fuzzed["crashes"],
            fuzz_crash_rate=fuzzed["crash_rate"],
            fuzz_violations=fuzzed["violations"],
            fuzz_hangs=fuzzed["hangs"],
            fuzz_crashes_by_target={k: v["crashes"] for k, v in fuzzed["targets"].items()},
            fuzz_problems={sig: sum(t["problems"].get(sig, 0) for t in fuzzed["targets"].values()) for sig in sorted({sig for t in fuzzed["targets"].values() for sig in t["problems"]})},
        )
    if "servers" in only:
        served = servers(corpus)
        summary.update(
            server_cases=served["cases"],
            server_clear=served["clear"],
            server_raw=served["raw"],
            server_clear_rate=served["clear_rate"],
            server_max_seconds_to_fail=served["max_seconds_to_fail"],
            server_retry_after_honoured=served["retry_after_honoured"],
            server_retry_after_clients=len(served["retry_after"]),
            server_raw_cases=[k for k, v in served["by_case"].items() if not v["clear"]],
        )
    if "tool_faults" in only:
        tools = tool_faults(corpus, episodes=120 if args.full else 40)
        summary["tool_faults"] = {rate: {k: v[k] for k in ("episodes", "completed", "faults", "recoveries", "recovery_rate", "success_rate")} for rate, v in tools.items()}
    if "secrets" in only:
        leaked = secrets(corpus, stage=args.full)
        summary.update(
            secret_leaks=leaked["leaks"],
            secret_leaks_by_place=leaked["leaks_by_place"],
            secret_in_authorization_headers=leaked["authorization_headers"],
            secret_echo_leaks=leaked["echo_leaks"],
            secret_echo_leaks_by_place=leaked["echo_leaks_by_place"],
            mlflow_artifacts_in_store=leaked["artifacts_in_store"],
        )
    if "kills" in only:
        killed = kills(n_kills, args.seed, budget_s=args.kill_budget * 60, stages=kill_stages)
        summary["kills"] = {k: v for k, v in killed.items() if k != "by_trial"}
        if killed.get("by_trial"):
            summary["kills_by_trial"] = [{k: v for k, v in t.items() if k != "rerun_output"} for t in killed["by_trial"]]

    seconds = time.perf_counter() - start
    print(f"total {seconds:.1f} s")
    summary["seconds"] = round(seconds, 1)
    print(json.dumps(summary))
