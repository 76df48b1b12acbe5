"""Feasible queries synthesised per second on the synthetic world (target: 10,000 in under 60 s).

The baseline is the same synthesis with the feasibility check re-reading
the sandbox through a fresh (cold) tool index for every query, as a tool
layer without shared lookups would.
"""

import argparse
import json
import time

from star.travel.specs import SynthesisSpec, WorldSpec
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import generate_world
from star.travel.world.tools import TravelTools


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--baseline-queries", type=int, default=20)
    args = parser.parse_args()
    # A world big enough to hold 10,000 distinct trips.
    world = generate_world(WorldSpec(states=8, cities_per_state=6, num_dates=30))
    mix = {3: 1.0, 5: 1.0, 7: 1.0}

    start = time.perf_counter()
    synthesizer = Synthesizer(world, SynthesisSpec(sizes={"train": args.queries, "validation": 0, "test": 0}, days=mix))
    kept = len(synthesizer.run()["train"])
    seconds = time.perf_counter() - start

    # Baseline: identical work, but every query gets a cold tool index.
    base = Synthesizer(world, SynthesisSpec(sizes={"train": args.baseline_queries, "validation": 0, "test": 0}, days=mix))
    solve = base.solve

    def cold_solve(query):
        base.tools = {t.name: t for t in TravelTools(world).as_tools()}
        return solve(query)

    base.solve = cold_solve
    start = time.perf_counter()
    base_kept = len(base.run()["train"])
    base_seconds = time.perf_counter() - start

    rate, base_rate = kept / seconds, base_kept / base_seconds
    print(f"synthesised {kept:,} feasible queries in {seconds:.1f} s ({rate:,.0f}/s; attempts {synthesizer.stats['attempts']:,})")
    print(f"baseline (cold index per query): {base_rate:,.1f}/s")
    print(json.dumps({"queries": kept, "seconds": round(seconds, 1), "queries_per_s": round(rate), "baseline_queries_per_s": round(base_rate, 1), "ratio": round(rate / base_rate, 1)}))


if __name__ == "__main__":
    main()
