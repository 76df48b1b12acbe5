"""Tool calls per second on the real TravelPlanner DB, against a pandas baseline.

The baseline filters a pandas DataFrame on every call and renders the same
rows, the way the official tools work. Both run the same mixed workload on
one core, in this process.
"""

import os

os.environ.setdefault("POLARS_MAX_THREADS", "1")

import json
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import travelplanner_db  # noqa: E402

from star.travel.world.sandbox import load_travelplanner  # noqa: E402
from star.travel.world.tools import TravelTools  # noqa: E402


def workload(sandbox, n: int, seed: int = 0) -> list[tuple[str, dict]]:
    rng = random.Random(seed)
    cities = sandbox.cities["city"].to_list()
    states = sandbox.states()
    routes = list(zip(sandbox.flights["origin"], sandbox.flights["dest"], sandbox.flights["date"]))
    legs = list(zip(sandbox.distances["origin"], sandbox.distances["dest"]))
    calls = []
    for _ in range(n):
        kind = rng.choice(["flight", "distance", "hotel", "restaurant", "attraction", "city"])
        if kind == "flight":
            o, d, day = rng.choice(routes)
            calls.append(("SearchFlight", {"departure": o, "destination": d, "date": day}))
        elif kind == "distance":
            o, d = rng.choice(legs)
            calls.append(("GoogleDistanceMatrix", {"departure": o, "destination": d, "mode": rng.choice(["self-driving", "taxi"])}))
        elif kind == "city":
            calls.append(("SearchCity", {"state": rng.choice(states)}))
        else:
            name = {"hotel": "SearchAccommodation", "restaurant": "SearchRestaurant", "attraction": "SearchAttraction"}[kind]
            calls.append((name, {"city": rng.choice(cities)}))
    return calls


class PandasTools:
    """The baseline: one DataFrame filter per call."""

    def __init__(self, sandbox, row_cap: int):
        self.cap = row_cap
        self.t = {name: frame.to_pandas() for name, frame in sandbox.tables().items()}

    def rows(self, frame, fmt):
        lines = [fmt(r) for r in frame.head(self.cap).to_dict("records")]
        return "\n".join(lines) or "none"

    def __call__(self, name, a):
        t = self.t
        if name == "SearchFlight":
            f = t["flights"]
            hit = f[(f["origin"] == a["departure"]) & (f["dest"] == a["destination"]) & (f["date"] == a["date"])]
            return self.rows(hit.sort_values("price"), lambda r: f"{r['flight_number']} | {r['dep_time']}-{r['arr_time']} | ${r['price']}")
        if name == "GoogleDistanceMatrix":
            f = t["distances"]
            hit = f[(f["origin"] == a["departure"]) & (f["dest"] == a["destination"])]
            return self.rows(hit, lambda r: f"{r['duration']}, {r['distance_km']} km")
        if name == "SearchCity":
            f = t["cities"]
            return ", ".join(sorted(f[f["state"] == a["state"]]["city"]))
        table = {"SearchAccommodation": "accommodations", "SearchRestaurant": "restaurants", "SearchAttraction": "attractions"}[name]
        f = t[table]
        return self.rows(f[f["city"] == a["city"]], lambda r: str(r["name"]))


def rate(fn, calls) -> float:
    start = time.perf_counter()
    for name, args in calls:
        fn(name, args)
    return len(calls) / (time.perf_counter() - start)


def main() -> None:
    sandbox = load_travelplanner(travelplanner_db())
    calls = workload(sandbox, 100_000)
    start = time.perf_counter()
    tools = {t.name: t for t in TravelTools(sandbox, row_cap=5).as_tools()}
    build_s = time.perf_counter() - start
    ours = rate(lambda n, a: tools[n].execute(a), calls)
    baseline = rate(PandasTools(sandbox, 5), calls[:2_000])
    print(f"index build: {build_s:.2f} s")
    print(f"star tools:      {ours:10,.0f} calls/s over {len(calls):,} mixed calls (cold start included)")
    print(f"pandas baseline: {baseline:10,.0f} calls/s over 2,000 of the same calls")
    print(json.dumps({"calls_per_s": round(ours), "baseline_calls_per_s": round(baseline), "ratio": round(ours / baseline, 1), "index_build_s": round(build_s, 2)}))


if __name__ == "__main__":
    main()
