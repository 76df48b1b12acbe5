"""Plans evaluated per second: star.travel.evaluation.evaluate against a pandas baseline.

The baseline scores plans the way the official TravelPlanner scripts do: for
every field of every plan, a boolean mask over a whole pandas DataFrame
(`str.contains` on the name, equality on the city). It implements the
official rules independently, so the run also reports how often the two
agree, verdict by verdict.

    python bench/evaluate.py [--plans 4000] [--baseline-plans 40] [--seed 0]

The last line printed is one JSON object.
"""

from __future__ import annotations

import os

# One core: keep every library single-threaded.
for _var in ("POLARS_MAX_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import math
import random
import re
import sys
import time
from collections import defaultdict
from dataclasses import asdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from star.travel.evaluation.commonsense import COMMONSENSE  # noqa: E402
from star.travel.evaluation.evaluate import evaluate_plan  # noqa: E402
from star.travel.evaluation.hard import HARD  # noqa: E402
from star.travel.plans.plan import Plan, plan_from_submission  # noqa: E402
from star.travel.world.query import Query  # noqa: E402
from star.travel.world.sandbox import CUISINES, Sandbox, load_travelplanner  # noqa: E402
from star.travel.world.sandbox_index import SandboxIndex  # noqa: E402

DATABASE = Path(os.environ.get("STAR_TRAVELPLANNER_DB", ROOT.parent / "shared/data/travelplanner/database"))


# ------------------------------------------------------------ plans to score
def make_cases(sb: Sandbox, n: int, seed: int) -> list[tuple[Query, Plan]]:
    """`n` distinct query/plan pairs from real rows; about half carry a defect."""
    rng = random.Random(seed)
    names: dict[str, dict[str, list[str]]] = {}
    for kind, frame in (("r", sb.restaurants), ("a", sb.attractions), ("h", sb.accommodations)):
        by_city: dict[str, list[str]] = defaultdict(list)
        for name, city in frame.select("name", "city").iter_rows():
            if name is not None:
                by_city[city].append(name)
        names[kind] = by_city
    city_state = dict(sb.cities.select("city", "state").iter_rows())
    usable = [c for c in city_state if len(names["r"][c]) >= 8 and len(names["a"][c]) >= 3 and names["h"][c]]
    drive = {}
    for o, d, dur, km in sb.distances.drop_nulls().select("origin", "dest", "duration", "distance_km").iter_rows():
        drive.setdefault((o, d), (dur, km))
    flights: dict[tuple[str, str, str], list[tuple]] = defaultdict(list)
    columns = ("flight_number", "dep_time", "arr_time", "date", "origin", "dest")
    for no, dep, arr, day, o, d in sb.flights.select(columns).iter_rows():
        flights[(o, d, day)].append((no, dep, arr))
    def returns(o: str, d: str, day: str) -> bool:
        return (d, o, (date.fromisoformat(day) + timedelta(days=2)).isoformat()) in flights

    round_flights = [(o, d, day) for (o, d, day) in flights if returns(o, d, day) and d in usable and o in city_state]
    round_drives = [(o, d) for (o, d) in drive if (d, o) in drive and d in usable and o in city_state]
    by_state: dict[str, list[str]] = defaultdict(list)
    for c in usable:
        by_state[city_state[c]].append(c)

    def drive_leg(mode: str, a: str, b: str) -> str:
        dur, km = drive.get((a, b), ("1 hour", 50.0))
        cost = int(km * 0.05) if mode == "Self-driving" else int(km)
        return f"{mode}, from {a} to {b}, duration: {dur}, distance: {km:g} km, cost: {cost}"

    cases: list[tuple[Query, Plan]] = []
    while len(cases) < n:
        ndays = rng.choice([3, 3, 3, 5, 7])
        start = date(2022, 3, rng.randint(1, 25))
        if ndays == 3 and rng.random() < 0.5 and round_flights:
            org, dest, day0 = rng.choice(round_flights)
            start = date.fromisoformat(day0)
            route = [dest]
        elif ndays == 3:
            org, dest = rng.choice(round_drives)
            route = [dest]
        else:
            k = 2 if ndays == 5 else 3
            states = [s for s, cs in by_state.items() if len(cs) >= k]
            dest = rng.choice(states)
            route = rng.sample(by_state[dest], k)
            outside = [
                c for c in city_state if city_state[c] != dest and (c, route[0]) in drive and (route[-1], c) in drive
            ]
            if not outside or any((a, b) not in drive for a, b in zip(route, route[1:])):
                continue
            org = rng.choice(outside)
        dates = [(start + timedelta(days=i)).isoformat() for i in range(ndays)]
        mode = rng.choice(["Self-driving", "Self-driving", "Taxi"])

        def leg(a: str, b: str, i: int) -> str:
            options = flights.get((a, b, dates[i]))
            if options and (a == org or b == org) and ndays == 3:
                no, dep, arr = rng.choice(options)
                return f"Flight Number: {no}, from {a} to {b}, Departure Time: {dep}, Arrival Time: {arr}"
            return drive_leg(mode, a, b)

        def pick(kind: str, city: str, k: int) -> list[str]:
            return [f"{x}, {city}" for x in rng.sample(names[kind][city], k)]

        days: list[dict[str, Any]] = []
        stops = [org, *route, org]
        for j, city in enumerate(route):
            meals = pick("r", city, 5)
            sights = pick("a", city, 3)
            hotel = pick("h", city, 1)[0]
            days.append(
                dict(
                    days=len(days) + 1,
                    current_city=f"from {stops[j]} to {city}",
                    transportation=leg(stops[j], city, len(days)),
                    breakfast=rng.choice(["-", meals[0]]),
                    attraction=rng.choice(["-", sights[0] + ";"]),
                    lunch=meals[1],
                    dinner=meals[2],
                    accommodation=hotel,
                )
            )
            days.append(
                dict(
                    days=len(days) + 1,
                    current_city=city,
                    transportation="-",
                    breakfast=meals[3],
                    attraction=f"{sights[1]};{sights[2]};",
                    lunch=meals[4],
                    dinner=pick("r", city, 1)[0],
                    accommodation=hotel,
                )
            )
        last = route[-1]
        days.append(
            dict(
                days=len(days) + 1,
                current_city=f"from {last} to {org}",
                transportation=leg(last, org, len(days)),
                breakfast=pick("r", last, 1)[0],
                attraction="-",
                lunch="-",
                dinner="-",
                accommodation="-",
            )
        )
        level = rng.choice(["easy", "medium", "hard"])
        local: dict[str, Any] = {"house rule": None, "cuisine": None, "room type": None, "transportation": None}
        if level != "easy":
            for key in rng.sample(["house rule", "cuisine", "room type"], 1 if level == "medium" else 2):
                local[key] = {
                    "house rule": lambda: rng.choice(["smoking", "parties", "children under 10", "visitors", "pets"]),
                    "cuisine": lambda: rng.sample(CUISINES, rng.randint(1, 3)),
                    "room type": lambda: rng.choice(["not shared room", "shared room", "private room", "entire room"]),
                }[key]()
        if level == "hard":
            local["transportation"] = rng.choice(["no flight", "no self-driving"])
        if rng.random() < 0.6:
            for _ in range(rng.randint(1, 2)):
                _defect(rng, days, org, route, names, city_state)
        query = Query(
            idx=len(cases) + 1,
            org=org,
            dest=dest,
            days=ndays,
            visiting_city_number=len(route),
            date=dates,
            people_number=rng.randint(1, 8),
            local_constraint=local,
            budget=rng.choice([800, 1500, 3000, 6000, 12000, 30000]),
            level=level,
        )
        cases.append((query, plan_from_submission({"idx": query.idx, "plan": days})))
    return cases


def _defect(rng: random.Random, days: list[dict], org: str, route: list[str], names, city_state) -> None:
    """Break the plan in one of the ways real model outputs go wrong."""
    d = rng.choice(days)
    meal = rng.choice(["breakfast", "lunch", "dinner"])
    other = rng.choice([c for c in names["r"] if c not in route and c != org] or [org])
    kind = rng.randrange(18)
    if kind == 0:
        d[meal] = f"Imaginary Bistro, {route[0]}"
    elif kind == 1:
        d[meal] = f"{rng.choice(names['r'][other])}, {other}"
    elif kind == 2:
        d[meal] = rng.choice([x[m] for x in days for m in ("lunch", "dinner") if x[m] != "-"])
    elif kind == 3:
        if d["attraction"] != "-":
            d["attraction"] = d["attraction"].rstrip(";")
        else:
            d["attraction"] = f"{rng.choice(names['a'][route[0]])}, {route[0]}"
    elif kind == 4:
        d[rng.choice(["transportation", "attraction", "accommodation", meal])] = "-"
    elif kind == 5:
        d[meal] = rng.choice(["", "Lunch at the hotel", "a, b, c", "(", ";;", "from to"])
    elif kind == 6:
        city = d["current_city"]
        d["current_city"] = f"{city}({city_state.get(city, 'X')})" if "from" not in city else city + " "
    elif kind == 7:
        city = d["current_city"]
        d["current_city"] = city + " " if rng.random() < 0.5 else city.replace(" to ", " to  ")
    elif kind == 8:
        days[-1]["transportation"] = days[-1]["transportation"].replace("Self-driving", "Taxi")
    elif kind == 9:
        name = d[meal].split(",")[0] if d[meal] != "-" else "Cafe"
        d[meal] = f"{name[: max(1, len(name) // 3)]}, {d[meal].split(', ')[-1] if d[meal] != '-' else route[0]}"
    elif kind == 10:
        hotel = days[0]["accommodation"]
        d["accommodation"] = f"{hotel.split(',')[0][:4]}, {route[0]}"
    elif kind == 11:
        days[0]["breakfast"] = f"{rng.choice(names['r'][org] or ['Cafe'])}, {org}"
    elif kind == 12:
        d["transportation"] = d["transportation"].replace("Flight Number: ", "flight number: ")
    elif kind == 13:
        d["transportation"] = rng.choice(["Bus", "Self-driving", "Taxi from here", f"Flight to {route[0]}"])
    elif kind == 14:
        del days[-1]
    elif kind == 15:
        d["current_city"] = rng.choice(["", "-", "You don't need to fill in the information for this or later days."])
    elif kind == 16:
        days.insert(1, dict(days[1]))
    else:
        d["current_city"] = f"from {other} to {route[0]}"


# ------------------------------------------------------------ pandas baseline
class PandasBaseline:
    """The official scoring, one DataFrame mask per plan field, no index and no cache."""

    def __init__(self, db: Path):
        # The official tools drop rows with a missing value; distances are read whole.
        self.flights = pd.read_csv(db / "flights/clean_Flights_2022.csv").dropna()
        self.hotels = pd.read_csv(db / "accommodations/clean_accommodations_2022.csv").dropna()
        self.restaurants = pd.read_csv(db / "restaurants/clean_restaurant_2022.csv").dropna()
        self.attractions = pd.read_csv(db / "attractions/attractions.csv").dropna()
        self.distances = pd.read_csv(db / "googleDistanceMatrix/distance.csv")
        lines = (db / "background/citySet_with_states.txt").read_text().split("\n")
        self.city_state = dict(line.split("\t") for line in lines if line)

    # text helpers
    @staticmethod
    def from_to(text: str):
        m = re.search(r"from\s+(.+?)\s+to\s+([^,]+)(?=[,\s]|$)", text)
        return m.groups() if m else (None, None)

    @staticmethod
    def paren(text: str) -> str:
        m = re.search(r"^(.*?)\([^)]*\)", text)
        return m.group(1) if m else text

    def name_city(self, text: str):
        m = re.search(r"(.*?),\s*([^,]+)(\(\w[\w\s]*\))?$", text)
        return (m.group(1).strip(), self.paren(m.group(2).strip()).strip()) if m else ("-", "-")

    def rows(self, frame: pd.DataFrame, name_col: str, city_col: str, text: str) -> pd.DataFrame:
        name, city = self.name_city(text)
        return frame[frame[name_col].astype(str).str.contains(re.escape(name)) & (frame[city_col] == city)]

    def drive_cost(self, a: str, b: str, mode: str):
        a, b = self.paren(a), self.paren(b)
        hit = self.distances[(self.distances["origin"] == a) & (self.distances["destination"] == b)]
        if len(hit) == 0:
            return None
        duration, distance = hit["duration"].values[0], hit["distance"].values[0]
        if not isinstance(duration, str) or not isinstance(distance, str) or "day" in duration:
            return None
        km = float(distance.replace("km", "").replace(",", ""))
        return int(km * 0.05) if "driving" in mode else int(km)

    @staticmethod
    def given(v: Any) -> bool:
        return bool(v) and v != "-"

    # commonsense
    def within_sandbox(self, q, plan):
        for d in plan:
            t = d["transportation"]
            if self.given(t):
                a, b = self.from_to(t)
                if a is None or b is None:
                    a, b = self.from_to(d["current_city"])
                if "flight number" in t.lower():
                    number = t.split("Flight Number: ")[1].split(",")[0]
                    f = self.flights
                    route = (f["OriginCityName"] == self.paren(a)) & (f["DestCityName"] == self.paren(b))
                    hit = f[(f["Flight Number"] == number) & route]
                    if len(hit) == 0:
                        return False
                elif "self-driving" in t.lower() or "taxi" in t.lower():
                    if a is None or b is None:
                        a = b = "-"
                    if self.drive_cost(a, b, "self-driving" if "self-driving" in t.lower() else "taxi") is None:
                        return False
            for m in ("breakfast", "lunch", "dinner"):
                if self.given(d[m]) and len(self.rows(self.restaurants, "Name", "City", d[m])) == 0:
                    return False
            if self.given(d["attraction"]):
                for piece in d["attraction"].split(";")[:-1]:
                    if len(self.rows(self.attractions, "Name", "City", piece)) == 0:
                        return False
            if self.given(d["accommodation"]) and len(self.rows(self.hotels, "NAME", "city", d["accommodation"])) == 0:
                return False
        return True

    def cities_of(self, current_city: str):
        if "from" in current_city:
            a, b = self.from_to(current_city)
            return [self.paren(a), self.paren(b)]  # raises on None, as officially
        return None

    def complete_information(self, q, plan):
        placeholder = "You don't need to fill in the information for this or later days."
        if sum(d["current_city"] != placeholder for d in plan) != q.days:
            return False
        seen = set()
        for i, d in enumerate(plan):
            pair = self.cities_of(d["current_city"])
            if pair:
                if i == 0 and pair[0] != q.org:
                    return False
                seen.update(pair)
            else:
                seen.add(self.paren(d["current_city"]))
        seen.discard(q.org)
        if len(seen) != q.visiting_city_number:
            return False
        filled = 0
        for i, d in enumerate(plan):
            cc = d["current_city"]
            if ("from " in cc or "to " in cc) and d["transportation"] in ("", "-"):
                return False
            if "from " not in cc and " to " not in cc and d["attraction"] in ("", "-"):
                return False
            if i != q.days - 1 and d["accommodation"] in ("", "-"):
                return False
            if "from " not in cc and any(d[m] in ("", "-") for m in ("breakfast", "lunch", "dinner")):
                return False
            filled += sum(1 for v in d.values() if v and v != "-")
        return filled / (6 * q.days) >= 0.5

    def within_current_city(self, q, plan):
        for d in plan:
            pair = self.cities_of(d["current_city"])
            places = pair if pair else self.paren(d["current_city"])
            if self.given(d["transportation"]):
                for p in places:
                    if p not in d["transportation"]:
                        return False
            for m in ("breakfast", "lunch", "dinner"):
                if self.given(d[m]) and not any(p in d[m] for p in places):
                    return False
            if self.given(d["attraction"]):
                for piece in d["attraction"].split(";")[:-1]:
                    if not any(p in piece for p in places):
                        return False
            if self.given(d["accommodation"]) and places[-1] not in d["accommodation"]:
                return False
        return True

    def reasonable_city_route(self, q, plan):
        route = []
        for i, d in enumerate(plan):
            pair = self.cities_of(d["current_city"])
            if pair:
                if i == 0 and pair[0] != q.org:
                    return False
                route += pair
            else:
                route.append(self.paren(d["current_city"]))
        if route[0] != route[-1] or len(route) < 3:
            return False
        visited, i = set(), 0
        while i < len(route):
            city, start = route[i], i
            if city in visited and start not in (0, len(route) - 1):
                return False
            while i < len(route) and route[i] == city:
                i += 1
            if i - start == 1 and 0 < start < len(route) - 1:
                return False
            visited.add(city)
        for k, city in enumerate(route):
            if city not in self.city_state:
                return False
            if k not in (0, len(route) - 1) and q.days > 3 and self.city_state[city] != q.dest:
                return False
        return True

    def diverse_restaurants(self, q, plan):
        seen = []
        for d in plan:
            for m in ("breakfast", "lunch", "dinner"):
                if self.given(d[m]):
                    if d[m] in seen:
                        return False
                    seen.append(d[m])
        return True

    def diverse_attractions(self, q, plan):
        seen = []
        for d in plan:
            if self.given(d["attraction"]):
                for piece in d["attraction"].split(";")[:-1]:
                    if piece in seen:
                        return False
                    seen.append(piece)
        return True

    def non_conflicting_transportation(self, q, plan):
        def kind(t):
            t = t.lower()
            return "taxi" if "taxi" in t else "self" if "self-driving" in t else "flight" if "flight" in t else None

        if not self.given(plan[0]["transportation"]):
            return False
        kinds = {kind(d["transportation"]) for d in plan if self.given(d["transportation"])}
        return not ("self" in kinds and ("flight" in kinds or "taxi" in kinds))

    def minimum_nights_stay(self, q, plan):
        runs: list[list] = []
        for d in plan:
            if runs and runs[-1][0] == d["accommodation"]:
                runs[-1][1] += 1
            else:
                runs.append([d["accommodation"], 1])
        for text, nights in runs:
            if text in ("-", ""):
                continue
            hit = self.rows(self.hotels, "NAME", "city", text)
            if len(hit) == 1 and nights < hit.iloc[0]["minimum nights"]:
                return False
        return True

    # hard
    def cost(self, q, plan):
        total = 0
        for d in plan:
            t = d["transportation"]
            if self.given(t):
                a, b = self.from_to(t)
                if a is None or b is None:
                    a, b = self.from_to(d["current_city"])
                if a is not None and b is not None:
                    if "flight number" in t.lower():
                        f = self.flights
                        hit = f[f["Flight Number"] == t.split("Flight Number: ")[1].split(",")[0]]
                        if len(hit):
                            total += hit["Price"].values[0] * q.people_number
                    elif "self-driving" in t.lower():
                        total += self.drive_cost(a, b, "self-driving") * math.ceil(q.people_number / 5)
                    elif "taxi" in t.lower():
                        total += self.drive_cost(a, b, "taxi") * math.ceil(q.people_number / 4)
            for m in ("breakfast", "lunch", "dinner"):
                if self.given(d[m]):
                    hit = self.rows(self.restaurants, "Name", "City", d[m])
                    if len(hit):
                        total += hit["Average Cost"].values[0] * q.people_number
            if self.given(d["accommodation"]):
                hit = self.rows(self.hotels, "NAME", "city", d["accommodation"])
                if len(hit):
                    total += hit["price"].values[0] * math.ceil(q.people_number / hit["maximum occupancy"].values[0])
        return total

    def room_rule(self, q, plan, rule):
        for d in plan:
            if self.given(d["accommodation"]):
                hit = self.rows(self.hotels, "NAME", "city", d["accommodation"])
                if len(hit) and rule in ("smoking", "parties", "children under 10", "visitors", "pets"):
                    if f"No {rule}" in str(hit["house_rules"].values[0]):
                        return False
        return True

    def cuisine(self, q, plan, wanted):
        found = set()
        for d in plan:
            for m in ("breakfast", "lunch", "dinner"):
                if not self.given(d[m]):
                    continue
                if self.name_city(d[m])[1] == q.org:
                    break
                hit = self.rows(self.restaurants, "Name", "City", d[m])
                if len(hit):
                    found.update(c for c in wanted if c in hit.iloc[0]["Cuisines"])
        return len(found) == len(wanted)

    def room_type(self, q, plan, wanted):
        allowed = {
            "not shared room": lambda t: t != "Shared room",
            "shared room": lambda t: t == "Shared room",
            "private room": lambda t: t == "Private room",
            "entire room": lambda t: t == "Entire home/apt",
        }
        for d in plan:
            if self.given(d["accommodation"]):
                hit = self.rows(self.hotels, "NAME", "city", d["accommodation"])
                if len(hit) and wanted in allowed and not allowed[wanted](hit["room type"].values[0]):
                    return False
        return True

    def transportation(self, q, plan, rule):
        for d in plan:
            t = d["transportation"]
            if not self.given(t):
                continue
            if (rule == "no flight" and "Flight" in t) or (rule == "no self-driving" and "Self-driving" in t):
                return False
        return True

    def evaluate(self, q: Query, plan: Plan) -> dict[str, Any]:
        days = [asdict(d) for d in plan.days[: q.days]]

        def safe(fn, *args):
            try:
                return bool(fn(q, days, *args))
            except Exception:  # where the official script would stop with an error
                return False

        out: dict[str, Any] = {k: safe(getattr(self, k)) for k in COMMONSENSE}
        hard: dict[str, Any] = dict.fromkeys(HARD)
        if out["complete_information"] and out["within_sandbox"]:
            lc = q.local_constraint
            hard["budget"] = safe(lambda q, p: self.cost(q, p) <= q.budget)
            hard["room_rule"] = True if lc["house rule"] is None else safe(self.room_rule, lc["house rule"])
            hard["cuisine"] = True if not lc["cuisine"] else safe(self.cuisine, lc["cuisine"])
            hard["room_type"] = True if lc["room type"] is None else safe(self.room_type, lc["room type"])
            rule = lc["transportation"]
            hard["transportation"] = True if rule is None else safe(self.transportation, rule)
        return out | hard


# ---------------------------------------------------------------------- run
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=4000, help="plans scored by star.travel.evaluation.evaluate")
    parser.add_argument("--baseline-plans", type=int, default=100, help="plans scored by the pandas baseline")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    assert (DATABASE / "flights").is_dir(), f"TravelPlanner database not found at {DATABASE}"

    sandbox = load_travelplanner(DATABASE)
    cases = make_cases(sandbox, args.plans, args.seed)
    t0 = time.perf_counter()
    index = SandboxIndex(sandbox)
    build_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    ours = [evaluate_plan(q, p, index) for q, p in cases]
    ours_s = time.perf_counter() - t0
    passed = sum(e.final_pass for e in ours)

    baseline = PandasBaseline(DATABASE)
    subset = cases[: args.baseline_plans]
    t0 = time.perf_counter()
    theirs = [baseline.evaluate(q, p) for q, p in subset]
    base_s = time.perf_counter() - t0

    keys = COMMONSENSE + HARD
    disagree = [
        (q.idx, k, e.commonsense.get(k, e.hard.get(k)), b[k])
        for (q, _), e, b in zip(subset, ours, theirs)
        for k in keys
        if {**e.commonsense, **e.hard}[k] != b[k]
    ]
    rate = len(cases) / ours_s
    base_rate = len(subset) / base_s
    print(f"database           {DATABASE}")
    print(f"plans              {len(cases)} ({passed} pass everything)")
    print(f"index build        {build_s * 1000:.0f} ms (once per sandbox)")
    print(f"star evaluator     {rate:,.0f} plans/s")
    print(f"pandas baseline    {base_rate:,.1f} plans/s on {len(subset)} plans")
    print(f"speed-up           {rate / base_rate:,.0f}x")
    print(f"verdicts compared  {len(subset) * len(keys)}, disagreements {len(disagree)}")
    for row in disagree[:10]:
        print("  disagreement", row)
    print(
        json.dumps(
            {
                "plans_per_s": round(rate, 1),
                "baseline_plans_per_s": round(base_rate, 2),
                "ratio": round(rate / base_rate, 1),
                "plans": len(cases),
                "baseline_plans": len(subset),
                "disagreements": len(disagree),
            }
        )
    )


if __name__ == "__main__":
    main()
