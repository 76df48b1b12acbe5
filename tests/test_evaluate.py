"""The evaluator, on the public TravelPlanner database and on a synthetic world.

Plans are built from real rows of whichever sandbox is given, so every test
runs on both; nothing here names a synthetic city or hotel.
"""

from __future__ import annotations

import copy
import io
import json
import math
from contextlib import redirect_stdout
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from star.io import read_jsonl
from star.travel.evaluation.commonsense import COMMONSENSE
from star.travel.evaluation.evaluate import evaluate_plan, evaluate_plans, main
from star.travel.evaluation.hard import HARD
from star.travel.evaluation.metrics import aggregate
from star.travel.plans.plan import DAY_FIELDS, Day, Plan, plan_from_submission, read_submission, write_submission
from star.travel.world.query import Query
from star.travel.world.sandbox import CUISINES, Sandbox
from star.travel.world.sandbox_index import index_for

MODES = ("official", "strict")
RULE_OF = {
    "No parties": "parties",
    "No smoking": "smoking",
    "No children under 10": "children under 10",
    "No visitors": "visitors",
    "No pets": "pets",
}


# ------------------------------------------------------------ building plans
@dataclass
class World:
    """Rows picked from one sandbox: enough for a 3-day round trip and its variants."""

    sandbox: Sandbox
    org: str
    dest: str
    third: str  # a third city, drivable from dest
    dates: list[str]
    out_leg: str
    back_leg: str
    out_cost: int  # per vehicle or per person, as the leg's kind counts it
    back_cost: int
    kind: str  # "drive" or "flight"
    restaurants: list[dict]  # in dest, names unique in their city
    attractions: list[dict]
    hotel: dict  # minimum nights <= 2, with at least one house rule
    long_hotel: dict | None  # minimum nights >= 3
    org_restaurant: dict
    third_restaurant: dict  # its text contains neither org nor dest
    taxi_back_leg: str | None
    third_leg: str
    out_km: float | None = None  # drive legs only
    back_km: float | None = None


def _unique(frame: pl.DataFrame, city: str) -> pl.DataFrame:
    """Rows of `city` that no other name in that city contains, and that are plainly written."""
    rows = frame.filter(pl.col("city") == city)
    names = [n for n in rows["name"].to_list() if n is not None]
    keep = [
        n
        for n in names
        if sum(n in m for m in names) == 1 and n == n.strip() and n and not any(ch in n for ch in ",;()")
    ]
    return rows.drop_nulls().filter(pl.col("name").is_in(keep))


def _drive(sandbox: Sandbox) -> dict[tuple[str, str], tuple[str, float]]:
    d = sandbox.distances.drop_nulls(["duration", "distance_km"]).filter(~pl.col("duration").str.contains("day"))
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for o, de, dur, km in d.select("origin", "dest", "duration", "distance_km").iter_rows():
        out.setdefault((o, de), (dur, km))
    return out


def _serves(row: dict, cuisine: str) -> bool:
    return cuisine in [c.strip() for c in row["cuisines"].split(",")]


def _cuisines_fit(rows: list[dict]) -> bool:
    """The cuisine cases need: a cuisine served nowhere, and one served by exactly one of six."""
    counts = [sum(_serves(r, c) for r in rows) for c in CUISINES]
    return any(n == 0 for n in counts) and any(0 < n <= len(rows) - 5 for n in counts) and any(counts)


def _drive_text(mode: str, o: str, d: str, dur: str, km: float) -> str:
    cost = int(km * 0.05) if mode == "Self-driving" else int(km)
    return f"{mode}, from {o} to {d}, duration: {dur}, distance: {km:g} km, cost: {cost}"


def _flight_text(number: str, o: str, d: str, dep: str, arr: str) -> str:
    return f"Flight Number: {number}, from {o} to {d}, Departure Time: {dep}, Arrival Time: {arr}"


def _plain_city(name: str) -> bool:
    return "from" not in name and "to " not in name and "(" not in name and name == name.strip()


def build_world(sandbox: Sandbox, kind: str = "drive", to: str | None = None) -> World:
    """The first round trip (to the city `to`, when given) with enough rows."""
    cities = dict(sandbox.cities.select("city", "state").iter_rows())
    drive = _drive(sandbox)
    rest, attr, hotels = sandbox.restaurants, sandbox.attractions, sandbox.accommodations
    if kind == "flight":
        f = sandbox.flights.drop_nulls()
        back = f.select(
            pl.col("origin").alias("dest"),
            pl.col("dest").alias("origin"),
            pl.col("date").alias("back_date"),
            pl.col("flight_number").alias("back_no"),
            pl.col("price").alias("back_price"),
            pl.col("dep_time").alias("back_dep"),
            pl.col("arr_time").alias("back_arr"),
        )
        pairs = (
            f.join(back, on=["origin", "dest"])
            .filter(
                pl.col("back_date").str.to_date(strict=False)
                == pl.col("date").str.to_date(strict=False) + pl.duration(days=2)
            )
            .unique(["origin", "dest"], keep="first", maintain_order=True)
        )
        candidates = [(r["origin"], r["dest"], r) for r in pairs.iter_rows(named=True)]
    else:
        candidates = [(o, d, None) for (o, d) in drive if (d, o) in drive]
    for org, dest, flight in candidates:
        if to is not None and dest != to:
            continue
        if org == dest or org not in cities or dest not in cities or not (_plain_city(org) and _plain_city(dest)):
            continue
        r = _unique(rest, dest)
        a = _unique(attr, dest)
        h = _unique(hotels, dest).filter(pl.col("house_rules").str.contains("No "))
        short = h.filter(pl.col("minimum_nights") <= 2).sort(
            pl.col("house_rules").str.contains("No parties"), descending=True, maintain_order=True
        )
        long = _unique(hotels, dest).filter(pl.col("minimum_nights") >= 3)
        ro = _unique(rest, org)
        if r.height < 6 or a.height < 3 or short.height == 0 or ro.height == 0 or not _cuisines_fit(r.to_dicts()):
            continue
        if kind == "drive" and long.height == 0:
            continue
        third = None
        for t in cities:
            if t in (org, dest) or (dest, t) not in drive or not _plain_city(t):
                continue
            rt = [
                x
                for x in _unique(rest, t).iter_rows(named=True)
                if org not in f"{x['name']}, {t}"
                and dest not in f"{x['name']}, {t}"
                and any(ch in f"{x['name']}, {t}" for ch in dest)
            ]
            if rt:
                third = (t, rt[0])
                break
        if third is None:
            continue
        if kind == "flight":
            start = date.fromisoformat(flight["date"])
            dates = [(start + timedelta(days=i)).isoformat() for i in range(3)]
            out_leg = _flight_text(flight["flight_number"], org, dest, flight["dep_time"], flight["arr_time"])
            back_leg = _flight_text(flight["back_no"], dest, org, flight["back_dep"], flight["back_arr"])
            out_cost, back_cost = flight["price"], flight["back_price"]
        else:
            dates = ["2022-03-16", "2022-03-17", "2022-03-18"]
            out_leg = _drive_text("Self-driving", org, dest, *drive[(org, dest)])
            back_leg = _drive_text("Self-driving", dest, org, *drive[(dest, org)])
            out_cost, back_cost = int(drive[(org, dest)][1] * 0.05), int(drive[(dest, org)][1] * 0.05)
        return World(
            sandbox=sandbox,
            org=org,
            dest=dest,
            third=third[0],
            dates=dates,
            out_leg=out_leg,
            back_leg=back_leg,
            out_cost=out_cost,
            back_cost=back_cost,
            kind=kind,
            restaurants=r.to_dicts(),
            attractions=a.to_dicts(),
            hotel=short.row(0, named=True),
            long_hotel=long.row(0, named=True) if long.height else None,
            org_restaurant=ro.row(0, named=True),
            third_restaurant=third[1],
            taxi_back_leg=_drive_text("Taxi", dest, org, *drive[(dest, org)]) if (dest, org) in drive else None,
            third_leg=_drive_text("Self-driving", dest, third[0], *drive[(dest, third[0])]),
            out_km=drive[(org, dest)][1] if kind == "drive" else None,
            back_km=drive[(dest, org)][1] if kind == "drive" else None,
        )
    raise AssertionError(f"no {kind} round trip with enough rows in this sandbox")


def at(row: dict, city: str | None = None) -> str:
    return f"{row['name']}, {city or row['city']}"


def make_query(w: World, **kw: Any) -> Query:
    local = {"house rule": None, "cuisine": None, "room type": None, "transportation": None}
    local.update(kw.pop("local", {}))
    fields = dict(
        idx=1,
        org=w.org,
        dest=w.dest,
        days=3,
        visiting_city_number=1,
        date=w.dates,
        people_number=3,
        local_constraint=local,
        budget=10**9,
        level="easy",
        query=f"A 3-day trip from {w.org} to {w.dest}.",
    )
    fields.update(kw)
    return Query(**fields)


def make_plan(w: World, meals: list[dict] | None = None, idx: int = 1) -> Plan:
    r = meals or w.restaurants[:6]
    a, h = w.attractions, w.hotel
    days = [
        Day(1, f"from {w.org} to {w.dest}", w.out_leg, "-", f"{at(a[0])};", at(r[0]), at(r[1]), at(h)),
        Day(2, w.dest, "-", at(r[2]), f"{at(a[1])};{at(a[2])};", at(r[3]), at(r[4]), at(h)),
        Day(3, f"from {w.dest} to {w.org}", w.back_leg, at(r[5]), "-", "-", "-", "-"),
    ]
    return Plan(idx=idx, query="trip", days=days)


def edit(plan: Plan, day: int, **fields: str) -> Plan:
    days = copy.deepcopy(plan.days)
    days[day - 1] = replace(days[day - 1], **fields)
    return replace(plan, days=days)


def hand_cost(w: World, people: int = 3) -> int:
    legs = w.out_cost + w.back_cost
    legs *= people if w.kind == "flight" else math.ceil(people / 5)
    meals = sum(r["cost"] for r in w.restaurants[:6]) * people
    rooms = 2 * w.hotel["price"] * math.ceil(people / w.hotel["max_occupancy"])
    return legs + meals + rooms


@pytest.fixture(scope="module", params=["real_sandbox", "synthetic_sandbox"])
def world(request) -> World:
    return build_world(request.getfixturevalue(request.param))


@pytest.fixture(scope="module")
def real_world(real_sandbox) -> World:
    return build_world(real_sandbox)


def failed(ev) -> tuple[set[str], set[str]]:
    return {k for k, v in ev.commonsense.items() if v is not True}, {k for k, v in ev.hard.items() if v is not True}


# ------------------------------------------------------------------- valid
@pytest.mark.parametrize("mode", MODES)
def test_valid_plan_passes_everything(world, mode):
    ev = evaluate_plan(make_query(world), make_plan(world), world.sandbox, mode)
    assert ev.delivered and ev.commonsense_pass and ev.hard_pass and ev.final_pass, ev.failed
    assert all(ev.commonsense[k] is True for k in COMMONSENSE) and all(ev.hard[k] is True for k in HARD)
    assert ev.cost == hand_cost(world)


@pytest.mark.parametrize("sandbox_name", ["real_sandbox", "synthetic_sandbox"])
@pytest.mark.parametrize("mode", MODES)
def test_valid_flight_plan_passes(request, sandbox_name, mode):
    w = build_world(request.getfixturevalue(sandbox_name), kind="flight")
    ev = evaluate_plan(make_query(w), make_plan(w), w.sandbox, mode)
    assert ev.final_pass, ev.failed
    assert ev.cost == hand_cost(w)


def _all_locals_passing(w: World) -> tuple[dict, list[dict]]:
    rules = w.hotel["house_rules"]
    rule = next(r for text, r in RULE_OF.items() if text not in rules)
    room = {"Entire home/apt": "entire room", "Private room": "private room", "Shared room": "shared room"}
    meals = w.restaurants[:6]
    served = [c for c in CUISINES if any(_serves(r, c) for r in meals)]
    local = {"house rule": rule, "cuisine": served[:2], "room type": room[w.hotel["room_type"]]}
    local["transportation"] = "no flight" if w.kind == "drive" else "no self-driving"
    return local, meals


@pytest.mark.parametrize("mode", MODES)
def test_all_local_constraints_set_and_met(world, mode):
    local, meals = _all_locals_passing(world)
    q = make_query(world, local=local, budget=hand_cost(world), level="hard")
    ev = evaluate_plan(q, make_plan(world, meals), world.sandbox, mode)
    assert ev.final_pass, ev.failed
    assert ev.hard_set == HARD


@pytest.mark.parametrize("people", [1, 4, 5, 6, 9])
def test_cost_multipliers(world, people):
    q = make_query(world, people_number=people)
    h = world.hotel
    meals = sum(r["cost"] for r in world.restaurants[:6]) * people
    rooms = 2 * h["price"] * math.ceil(people / h["max_occupancy"])
    driving = (int(world.out_km * 0.05) + int(world.back_km * 0.05)) * math.ceil(people / 5)
    taxi = (int(world.out_km) + int(world.back_km)) * math.ceil(people / 4)
    by_taxi = edit(make_plan(world), 1, transportation=world.out_leg.replace("Self-driving", "Taxi"))
    by_taxi = edit(by_taxi, 3, transportation=world.taxi_back_leg)
    for mode in MODES:
        assert evaluate_plan(q, make_plan(world), world.sandbox, mode).cost == driving + meals + rooms
        assert evaluate_plan(q, by_taxi, world.sandbox, mode).cost == taxi + meals + rooms


# ----------------------------------------------- one failing plan per constraint
def _cuisine_nobody_serves(w: World) -> tuple[str, list[dict]]:
    for c in CUISINES:
        meals = [r for r in w.restaurants if not _serves(r, c)]
        if len(meals) >= 6:
            return c, meals[:6]
    raise AssertionError("every cuisine is served almost everywhere")


def case(w: World, key: str) -> tuple[Query, Plan]:
    q, p = make_query(w), make_plan(w)
    r, a, d = w.restaurants, w.attractions, w.dest
    if key == "within_sandbox":
        return q, edit(p, 2, lunch=f"Zzqx Imaginary Diner, {d}")
    if key == "complete_information":
        return q, edit(p, 2, attraction="-")
    if key == "within_current_city":
        return q, edit(p, 1, dinner=at(w.third_restaurant))
    if key == "reasonable_city_route":
        q = make_query(w, visiting_city_number=2)
        return q, edit(p, 3, current_city=f"from {d} to {w.third}", transportation=w.third_leg)
    if key == "diverse_restaurants":
        return q, edit(p, 2, dinner=at(r[0]))
    if key == "diverse_attractions":
        return q, edit(p, 2, attraction=f"{at(a[1])};{at(a[0])};")
    if key == "non_conflicting_transportation":
        return q, edit(p, 3, transportation=w.taxi_back_leg)
    if key == "minimum_nights_stay":
        lh = at(w.long_hotel)
        return q, edit(edit(p, 1, accommodation=lh), 2, accommodation=lh)
    if key == "budget":
        return make_query(w, budget=hand_cost(w) - 1), p
    if key == "room_rule":
        rule = next(r for text, r in RULE_OF.items() if text in w.hotel["house_rules"])
        return make_query(w, local={"house rule": rule}), p
    if key == "cuisine":
        cuisine, meals = _cuisine_nobody_serves(w)
        return make_query(w, local={"cuisine": [cuisine]}), make_plan(w, meals)
    if key == "room_type":
        wrong = "not shared room" if w.hotel["room_type"] == "Shared room" else "shared room"
        return make_query(w, local={"room type": wrong}), p
    if key == "transportation":
        return make_query(w, local={"transportation": "no self-driving"}), p
    raise KeyError(key)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key", COMMONSENSE + HARD)
def test_each_constraint_fails_alone(world, key, mode):
    q, p = case(world, key)
    ev = evaluate_plan(q, p, world.sandbox, mode)
    bad_cs, bad_hard = failed(ev)
    assert not ev.final_pass
    if key in COMMONSENSE:
        assert bad_cs == {key}
        gated = mode == "official" and key in ("within_sandbox", "complete_information")
        assert all(v is None for v in ev.hard.values()) if gated else bad_hard == set()
    else:
        assert bad_cs == set() and bad_hard == {key}
        assert ev.commonsense_pass and not ev.hard_pass


def test_undelivered_plan_fails_everything(world):
    q = make_query(world)
    for plan in (Plan(idx=1), Plan(idx=1, days=make_plan(world).days, error="format error")):
        for mode in MODES:
            ev = evaluate_plan(q, plan, world.sandbox, mode)
            assert not ev.delivered and not ev.final_pass and ev.commonsense_passed == 0 and ev.hard_passed == 0
            json.dumps(ev.to_dict())


# ------------------------------------------------------------------- quirks
def verdicts(q: Query, p: Plan, sandbox, key: str) -> dict[str, bool | None]:
    out = {}
    for mode in MODES:
        ev = evaluate_plan(q, p, sandbox, mode)
        out[mode] = {**ev.commonsense, **ev.hard}[key]
    return out


def test_quirk_attraction_without_trailing_semicolon(world):
    q, p = make_query(world), make_plan(world)
    fake = edit(p, 2, attraction=f"{at(world.attractions[1])};Zzqx Imaginary Park, {world.dest}")
    assert verdicts(q, fake, world.sandbox, "within_sandbox") == {"official": True, "strict": False}
    repeat = edit(p, 2, attraction=at(world.attractions[0]))  # day 1 has it, with ";"
    assert verdicts(q, repeat, world.sandbox, "diverse_attractions") == {"official": True, "strict": False}


def test_quirk_current_city_only_checked_on_travel_days(world):
    q, p = make_query(world), make_plan(world)
    elsewhere = edit(p, 2, lunch=at(world.third_restaurant))
    assert verdicts(q, elsewhere, world.sandbox, "within_current_city") == {"official": True, "strict": False}
    on_travel_day = edit(p, 1, lunch=at(world.third_restaurant))
    assert verdicts(q, on_travel_day, world.sandbox, "within_current_city") == {"official": False, "strict": False}


@pytest.mark.parametrize("sandbox_name", ["real_sandbox", "synthetic_sandbox"])
def test_quirk_flight_date_not_checked(request, sandbox_name):
    w = build_world(request.getfixturevalue(sandbox_name), kind="flight")
    p = make_plan(w)
    later = [(date.fromisoformat(x) + timedelta(days=1)).isoformat() for x in w.dates]
    assert verdicts(make_query(w), p, w.sandbox, "within_sandbox") == {"official": True, "strict": True}
    assert verdicts(make_query(w, date=later), p, w.sandbox, "within_sandbox") == {"official": True, "strict": False}


def test_quirk_hard_constraints_null_unless_complete_and_in_sandbox(world):
    q, p = case(world, "within_sandbox")
    official = evaluate_plan(q, p, world.sandbox, "official")
    strict = evaluate_plan(q, p, world.sandbox, "strict")
    assert set(official.hard.values()) == {None} and not official.hard_pass
    assert all(v is True for v in strict.hard.values()) and strict.hard_pass
    assert not strict.final_pass  # within_sandbox still fails


def test_quirk_city_parenthesis_and_trailing_space(world):
    q, p = make_query(world), make_plan(world)
    state = index_for(world.sandbox).city_state[world.dest]
    cut = edit(p, 2, current_city=f"{world.dest}({state})")
    spaced = edit(p, 2, current_city=f"{world.dest} ")
    spaced_paren = edit(p, 2, current_city=f"{world.dest} ({state})")
    assert verdicts(q, cut, world.sandbox, "reasonable_city_route") == {"official": True, "strict": True}
    assert verdicts(q, spaced, world.sandbox, "reasonable_city_route") == {"official": False, "strict": True}
    assert verdicts(q, spaced_paren, world.sandbox, "reasonable_city_route") == {"official": False, "strict": True}


def test_quirk_breakfast_at_home_skips_the_days_other_meals(world):
    for cuisine in CUISINES:
        serving = [r for r in world.restaurants if _serves(r, cuisine)]
        others = [r for r in world.restaurants if not _serves(r, cuisine)]
        if serving and len(others) >= 5:
            break
    else:
        raise AssertionError("no cuisine served by one restaurant and missing from five")
    p = make_plan(world, [serving[0]] + others[:5])  # day 1 lunch serves the cuisine, nothing else does
    p = edit(p, 1, breakfast=at(world.org_restaurant), dinner="-")
    q = make_query(world, local={"cuisine": [cuisine]})
    assert verdicts(q, p, world.sandbox, "cuisine") == {"official": False, "strict": True}
    assert verdicts(q, edit(p, 1, breakfast="-"), world.sandbox, "cuisine") == {"official": True, "strict": True}


# The official code charges the first matching row of a repeated name
# (`res['Average Cost'].values[0]` in get_total_cost, evaluation/hard_constraint.py);
# both modes do, never the cheapest row.
def _repeated_names(sandbox: Sandbox, table: str, price: str) -> pl.DataFrame:
    """(name, city) written on several rows with different prices, rows in table order."""
    rows = getattr(sandbox, table).filter(pl.col("name").is_not_null())
    keys = [pl.col("name").str.strip_chars(), pl.col("city").str.strip_chars()]
    return rows.group_by(keys, maintain_order=True).agg(pl.col(price)).filter(pl.col(price).list.n_unique() > 1)


@pytest.mark.parametrize(
    "kind, table, price", [("restaurant", "restaurants", "cost"), ("hotel", "accommodations", "price")]
)
def test_repeated_names_read_their_first_row(real_sandbox, kind, table, price):
    ix = index_for(real_sandbox)
    repeated = _repeated_names(real_sandbox, table, price)
    assert repeated.height > 0
    complete = getattr(real_sandbox, table).drop_nulls()
    cheaper_later = 0
    for name, city, prices in repeated.iter_rows():
        # strict: the exact name's first row, among all rows
        assert getattr(ix.exact(kind, name, city), price) == (prices[0] or 0), (name, city)
        # official: the first complete row of the city whose name contains it
        hits = complete.filter((pl.col("city") == city) & pl.col("name").str.contains(name, literal=True))
        row = ix.first(kind, name, city)
        assert (row is None) if hits.height == 0 else getattr(row, price) == hits[price][0], (name, city)
        cheaper_later += min(p for p in prices if p is not None) < (prices[0] or 0)
    if kind == "restaurant":
        assert cheaper_later > 20  # the cheapest row is often not the first


def test_repeated_name_costs_its_first_row_in_both_modes(real_world):
    w = real_world
    repeated = _repeated_names(w.sandbox, "restaurants", "cost")
    complete = w.sandbox.restaurants.drop_nulls()
    for name, city, costs in repeated.iter_rows():
        hits = complete.filter((pl.col("city") == city) & pl.col("name").str.contains(name, literal=True))
        # a plain case: the official substring look-up finds this name's own first row
        if costs[0] is not None and costs[0] > min(costs) and hits.height and hits["name"][0].strip() == name:
            break
    else:
        raise AssertionError("no repeated restaurant whose first row is not its cheapest")
    q, p = make_query(w), make_plan(w)
    with_dup = edit(p, 2, breakfast=f"{name}, {city}")
    without = edit(p, 2, breakfast="-")
    delta = {
        m: evaluate_plan(q, with_dup, w.sandbox, m).cost - evaluate_plan(q, without, w.sandbox, m).cost for m in MODES
    }
    assert delta == {"official": costs[0] * q.people_number, "strict": costs[0] * q.people_number}


def test_rows_with_a_missing_value_exist_only_in_strict(real_world):
    w = real_world
    hotels = w.sandbox.accommodations
    names = hotels.group_by("name", "city").len().filter(pl.col("len") == 1)
    hidden = hotels.filter(pl.col("house_rules").is_null() & pl.col("name").is_not_null())
    hidden = hidden.join(names, on=["name", "city"]).sort("city", "name")  # a join's row order is not fixed
    h = next(r for r in hidden.iter_rows(named=True) if "," not in r["name"] and r["name"] == r["name"].strip())
    p = edit(make_plan(w), 2, accommodation=at(h))
    assert verdicts(make_query(w), p, w.sandbox, "within_sandbox") == {"official": False, "strict": True}


def test_house_rule_parties_is_checked(real_world):
    w = real_world
    assert "No parties" in w.hotel["house_rules"]
    q = make_query(w, local={"house rule": "parties"})
    assert verdicts(q, make_plan(w), w.sandbox, "room_rule") == {"official": False, "strict": False}


def test_minimum_nights_only_checked_on_a_unique_match_officially(real_world):
    w = real_world
    lh = w.long_hotel
    # A prefix of the name that matches several hotels of the city.
    names = w.sandbox.accommodations.drop_nulls().filter(pl.col("city") == w.dest)["name"].to_list()
    prefixes = (lh["name"][:k] for k in range(1, len(lh["name"])))
    prefix = next((x for x in prefixes if sum(x in n for n in names) > 1), None)
    assert prefix is not None
    p = make_plan(w)
    p = edit(edit(p, 1, accommodation=f"{prefix}, {w.dest}"), 2, accommodation=f"{prefix}, {w.dest}")
    assert verdicts(make_query(w), p, w.sandbox, "minimum_nights_stay")["official"] is True


# ------------------------------------------------------ Washington, a city and a state
@pytest.mark.parametrize("kind", ["drive", "flight"])
@pytest.mark.parametrize("mode", MODES)
def test_one_city_trip_to_washington_passes(real_sandbox, kind, mode):
    ix = index_for(real_sandbox)
    assert "Washington" in ix.states and ix.city_state["Washington"] != "Washington"
    w = build_world(real_sandbox, kind=kind, to="Washington")
    ev = evaluate_plan(make_query(w), make_plan(w), w.sandbox, mode)
    assert ev.final_pass, ev.failed


def test_state_trip_to_washington_visits_the_state(real_sandbox):
    ix = index_for(real_sandbox)
    state = sorted(c for c, s in ix.city_state.items() if s == "Washington" and _plain_city(c))
    org = next(c for c, s in sorted(ix.city_state.items()) if s not in ("Washington", "District of Columbia"))
    q = Query(org=org, dest="Washington", days=5, visiting_city_number=2, date=["2022-03-10"] * 5,
              people_number=1, budget=10**9, query="A 5-day trip to 2 cities in Washington.")

    def route(a: str, b: str) -> Plan:
        cities = [f"from {org} to {a}", a, f"from {a} to {b}", b, f"from {b} to {org}"]
        return Plan(idx=1, days=[Day(i + 1, c) for i, c in enumerate(cities)])

    both = verdicts(q, route(state[0], state[1]), real_sandbox, "reasonable_city_route")
    assert both == {"official": True, "strict": True}
    # The city of Washington is in the District of Columbia, not in the state.
    capital = verdicts(q, route(state[0], "Washington"), real_sandbox, "reasonable_city_route")
    assert capital == {"official": False, "strict": False}


def test_city_sequence_rules():
    from star.travel.evaluation.commonsense import valid_sequence

    assert valid_sequence(list("ABBA")) and valid_sequence(list("ABBBA")) and valid_sequence(list("ABBCCA"))
    assert not valid_sequence(list("ABA"))  # a stay in the middle is one entry long
    assert not valid_sequence(list("ABBCCBBA"))  # B is visited twice
    assert not valid_sequence(list("ABBAA")) and not valid_sequence(list("AA"))


def test_route_with_a_one_entry_stay_fails(world):
    p = edit(make_plan(world), 2, current_city=world.third)  # O->D, then suddenly in T, T->O
    p = edit(p, 3, current_city=f"from {world.third} to {world.org}")
    route = verdicts(make_query(world), p, world.sandbox, "reasonable_city_route")
    assert route == {"official": False, "strict": False}


def test_complete_information_needs_half_the_fields(world):
    w, t = world, world.third
    ret = w.back_leg.replace(w.dest, t)

    def plan(n: int) -> Plan:
        days = [
            Day(n, f"from {w.org} to {w.dest}", w.out_leg, accommodation=at(w.hotel)),
            Day(n, f"from {w.dest} to {t}", w.third_leg, accommodation=f"Somewhere, {t}"),
            Day(n, f"from {t} to {w.org}", ret),
        ]
        return Plan(1, days=days)

    q = make_query(w, visiting_city_number=2)
    # day numbers count as filled fields: 11/18 filled passes, 8/18 does not
    assert verdicts(q, plan(1), w.sandbox, "complete_information") == {"official": True, "strict": True}
    assert verdicts(q, plan(0), w.sandbox, "complete_information") == {"official": False, "strict": False}


# ------------------------------------------------------------------ metrics
def test_metric_denominators_by_hand(real_world):
    w = real_world
    local, meals = _all_locals_passing(w)
    cost = hand_cost(w)
    queries = [
        make_query(w, idx=1, level="easy"),
        make_query(w, idx=2, level="medium", local={"room type": local["room type"]}, budget=cost - 1),
        make_query(w, idx=3, level="hard", local={k: local[k] for k in ("house rule", "cuisine", "transportation")}),
        make_query(w, idx=4, level="easy"),
    ]
    plans = [
        make_plan(w, idx=1),
        make_plan(w, idx=2),
        Plan(idx=3, error="no plan"),
        edit(make_plan(w, idx=4), 2, lunch=f"Zzqx Imaginary Diner, {w.dest}"),
    ]
    official = aggregate(queries, evaluate_plans(queries, plans, w.sandbox, "official"))
    assert official["commonsense_checks"] == 32 and official["hard_checks"] == 8
    assert official["delivery_rate"] == 3 / 4
    assert official["commonsense_micro"] == (8 + 8 + 0 + 7) / 32
    assert official["commonsense_macro"] == 2 / 4
    assert official["hard_micro"] == (1 + 1 + 0 + 0) / 8
    assert official["hard_macro"] == 1 / 4
    assert official["final_pass_rate"] == 1 / 4
    easy = official["by_level"]["easy"]
    assert easy["n"] == 2 and easy["commonsense_micro"] == 15 / 16
    assert easy["hard_micro"] == 1 / 2 and easy["final_pass_rate"] == 1 / 2
    assert official["by_level"]["hard"]["hard_checks"] == 4 and official["by_level"]["hard"]["delivery_rate"] == 0
    assert list(official["by_days"]) == ["3"] and official["by_days"]["3"]["n"] == 4

    strict = aggregate(queries, evaluate_plans(queries, plans, w.sandbox, "strict"))
    assert strict["hard_micro"] == 3 / 8 and strict["hard_macro"] == 2 / 4 and strict["final_pass_rate"] == 1 / 4


def test_plans_are_matched_to_queries_by_idx(real_world):
    w = real_world
    queries = [make_query(w, idx=7), make_query(w, idx=9)]
    evs = evaluate_plans(queries, [make_plan(w, idx=9)], w.sandbox)
    assert [e.idx for e in evs] == [7, 9] and [e.delivered for e in evs] == [False, True]


# --------------------------------------------------------------- JSON null
def _null(w: World, day: int, field: str) -> Plan:
    """The valid plan with one field null, read from submission JSON."""
    row = make_plan(w).to_submission()
    row["plan"][day - 1][field] = None
    return plan_from_submission(json.loads(json.dumps(row)))


# field, day -> commonsense failures (official, strict). Officially a null is skipped
# like "-" but is not missing for completeness; a null hotel or city crashes the
# official script, which fails those checks here. Strict reads a null as "-".
NULL_CASES = {
    ("breakfast", 2): (set(), {"complete_information"}),
    ("lunch", 2): (set(), {"complete_information"}),
    ("dinner", 2): (set(), {"complete_information"}),
    ("attraction", 2): (set(), {"complete_information"}),
    ("transportation", 1): (
        {"non_conflicting_transportation"},
        {"complete_information", "non_conflicting_transportation"},
    ),
    ("accommodation", 1): ({"minimum_nights_stay"}, {"complete_information"}),
    ("current_city", 2): (
        {"complete_information", "within_current_city", "reasonable_city_route"},
        {"complete_information", "within_current_city", "reasonable_city_route"},
    ),
}


@pytest.mark.parametrize("field, day", list(NULL_CASES), ids=[f"{f}{d}" for f, d in NULL_CASES])
def test_null_field_follows_the_official_code(real_world, field, day):
    w = real_world
    plan = _null(w, day, field)
    assert getattr(plan.days[day - 1], field) is None
    official, strict = NULL_CASES[field, day]
    q = make_query(w)
    ev = {m: evaluate_plan(q, plan, w.sandbox, m) for m in MODES}
    assert failed(ev["official"])[0] == official
    bad = failed(ev["strict"])[0]
    # a hotel missing on day 1 may also break its minimum nights, as "-" does
    assert bad - {"minimum_nights_stay"} == strict if field == "accommodation" else bad == strict
    dash = evaluate_plan(q, edit(make_plan(w), day, **{field: "-"}), w.sandbox, "strict")
    assert dash.commonsense == ev["strict"].commonsense and dash.cost == ev["strict"].cost


def test_null_meal_passes_officially_and_costs_nothing(real_world):
    w = real_world
    q = make_query(w)
    plan = _null(w, 2, "lunch")
    ev = evaluate_plan(q, plan, w.sandbox, "official")
    assert ev.final_pass, ev.failed
    assert ev.cost == hand_cost(w) - w.restaurants[3]["cost"] * q.people_number
    # "-" is missing: the same plan with "-" fails completeness, and hard constraints are not evaluated
    dash = evaluate_plan(q, edit(make_plan(w), 2, lunch="-"), w.sandbox, "official")
    assert dash.commonsense["complete_information"] is False and set(dash.hard.values()) == {None}


def test_null_survives_a_submission_round_trip(real_world, tmp_path):
    path = tmp_path / "plans.jsonl"
    write_submission(path, [_null(real_world, 2, "lunch")])
    assert json.loads(path.read_text())["plan"][1]["lunch"] is None
    assert read_submission(path)[0].days[1].lunch is None


# ----------------------------------------------------- formats and the CLI
def test_submission_round_trip(world, tmp_path):
    q = make_query(world)
    plans = [make_plan(world, idx=1), case(world, "diverse_restaurants")[1], Plan(idx=3, error="x")]
    plans[1].idx = 2
    path = tmp_path / "plans.jsonl"
    write_submission(path, plans)
    back = read_submission(path)
    assert [p.to_submission() for p in back] == [p.to_submission() for p in plans]
    for mode in MODES:
        before = [evaluate_plan(q, p, world.sandbox, mode).to_dict() for p in plans]
        after = [evaluate_plan(q, p, world.sandbox, mode).to_dict() for p in back]
        for b, a in zip(before, after):
            b.pop("error"), a.pop("error")  # an empty plan reads back as "empty plan"
        assert before == after


def test_cli_scores_a_submission(real_world, tp_database, tmp_path):
    w = real_world
    rows = []
    for i in (1, 2):
        row = make_query(w, idx=i).to_row()
        row.pop("idx")  # position in the file gives the idx
        row["local_constraint"] = str(row["local_constraint"])  # as in the official files
        rows.append(row)
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    repeat = replace(case(w, "diverse_attractions")[1], idx=2)
    write_submission(tmp_path / "p.jsonl", [make_plan(w, idx=1), repeat])
    parquet = tmp_path / "sandbox"
    w.sandbox.save(parquet)
    for db in (tp_database, parquet):
        out = io.StringIO()
        args = ["--database", str(db), "--queries", str(tmp_path / "q.jsonl"), "--plans", str(tmp_path / "p.jsonl")]
        with redirect_stdout(out):
            main([*args, "--out", str(tmp_path / "r.jsonl")])
        metrics = json.loads(out.getvalue().strip().splitlines()[-1])
        assert metrics["final_pass_rate"] == 0.5 and metrics["commonsense_micro"] == 15 / 16
        assert "by_level" in metrics and "Delivery" not in out.getvalue().splitlines()[-1]
        results = read_jsonl(tmp_path / "r.jsonl")
        assert [r["final_pass"] for r in results] == [True, False]
        assert results[1]["failed"] == ["diverse_attractions"]


# ------------------------------------------------------------ never raises
_FRAGMENTS = [
    "from ", " to ", "Flight Number: ", "flight number", "Self-driving", "taxi", ", ", ";", "(", ")", "-",
    "day", "\n", " ", "Austin", "Dallas", "Texas", "Z", "",
    "You don't need to fill in the information for this or later days.",
]
_texts = st.one_of(st.text(max_size=30), st.lists(st.sampled_from(_FRAGMENTS), max_size=8).map("".join))
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | _texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_texts, inner, max_size=4),
    max_leaves=12,
)
_day = st.dictionaries(st.sampled_from(DAY_FIELDS + ("day", "extra")), _json | _texts, max_size=10)
_plans = st.one_of(_json, st.lists(_day, max_size=8), st.lists(_day, max_size=4).map(json.dumps))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=_plans, values=st.lists(_json, min_size=8, max_size=8), days=st.integers(1, 7))
def test_never_raises_on_arbitrary_plans(real_world, raw, values, days):
    w = real_world
    local = {"house rule": "pets", "cuisine": ["Chinese", "Chinese"], "transportation": "no flight"}
    q = make_query(w, days=days, local=local)
    wrong_types = Plan(idx=1, days=[Day(*values)])  # fields of any type, not only strings
    for plan in (plan_from_submission({"idx": 1, "plan": raw}), wrong_types):
        for mode in MODES:
            ev = evaluate_plan(q, plan, w.sandbox, mode)
            json.dumps(ev.to_dict())
            assert isinstance(ev.final_pass, bool)


def test_non_finite_numbers_in_a_submission_make_undelivered_plans(tmp_path):
    path = tmp_path / "plans.jsonl"
    path.write_text('{"idx": 1e999, "plan": []}\n{"idx": 2, "plan": [{"days": Infinity}]}\n')
    first, second = read_submission(path)
    assert first.idx == 1 and not second.delivered and "day number" in second.error
