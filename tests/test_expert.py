"""The expert and the full-sandbox solver: real TravelPlanner queries of every length, the default synthetic world."""

import random

import pytest

from star.travel.evaluation.evaluate import evaluate_plan
from star.travel.evaluation.hard import ROOM_TYPE_OK
from star.travel.planner.expert import Expert, ToolFacts, parse_hotels, parse_restaurants
from star.travel.planner.planning import Option, choose_transport
from star.travel.planner.solver import Solver
from star.travel.specs import SynthesisSpec
from star.travel.world.query import Query
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.tools import TravelTools

PER_LENGTH = 20


def play(script, tools: dict):
    """The script's calls and its answer."""
    calls = []
    try:
        call = next(script)
        while True:
            calls.append((call.name, call.arguments))
            call = script.send(tools[call.name].execute(call.arguments).content)
    except StopIteration as stop:
        return calls, stop.value


@pytest.fixture(scope="module")
def real(real_sandbox):
    """Queries of 3, 5 and 7 days at every level, kept because the solver found a plan over the full sandbox."""
    queries = []
    for days in (3, 5, 7):
        spec = SynthesisSpec(seed=11, sizes={"train": PER_LENGTH, "validation": 0, "test": 0}, days={days: 1}, keep="feasible")
        queries += Synthesizer(real_sandbox, spec).run()["train"]
    tools = {t.name: t for t in TravelTools(real_sandbox, row_cap=5).as_tools()}
    runs = [play(Expert(0.0, 1, 0.0).script(q, random.Random(0)), tools) for q in queries]
    return queries, runs, index_for(real_sandbox)


def test_the_solver_proves_every_kept_query_feasible(real_sandbox, real):
    queries, _, index = real
    assert {(q.days, q.level) for q in queries} == {(d, lv) for d in (3, 5, 7) for lv in ("easy", "medium", "hard")}
    solver = Solver(real_sandbox)
    for q in queries:
        answer = solver.solve(q)
        assert answer.ok and answer.cost <= q.budget
        assert evaluate_plan(q, answer.plan, index).final_pass, q


def test_the_expert_solves_real_queries_through_capped_tools(real):
    queries, runs, index = real
    passed = [evaluate_plan(q, answer.plan, index).final_pass for q, (_, answer) in zip(queries, runs)]
    assert sum(passed) / len(queries) >= 0.95
    week = [ok for q, ok in zip(queries, passed) if q.days == 7]
    assert sum(week) / len(week) >= 0.9
    assert all(len(calls) <= 40 for calls, _ in runs)


def _modes(plan) -> set[str]:
    text = " ".join(d.transportation for d in plan.days)
    return {m for m, word in (("flight", "Flight"), ("self-driving", "Self-driving"), ("taxi", "Taxi")) if word in text}


def test_the_expert_honours_transport_rules(real):
    queries, runs, _ = real
    seen = set()
    for q, (calls, answer) in zip(queries, runs):
        modes = _modes(answer.plan)
        assert not ("self-driving" in modes and modes & {"flight", "taxi"}), answer.text
        rule = q.local_constraint.get("transportation")
        if rule == "no flight":
            assert "flight" not in modes and all(name != "SearchFlight" for name, _ in calls)
        if rule == "no self-driving":
            assert "self-driving" not in modes
            assert all(args.get("mode") != "self-driving" for name, args in calls if name == "GoogleDistanceMatrix")
        seen.add(rule)
    assert {"no flight", "no self-driving"} <= seen


def _query(**local) -> Query:
    constraint = {"house rule": None, "cuisine": None, "room type": None, "transportation": None} | local
    return Query(org="A", dest="B", days=3, visiting_city_number=1, date=["2022-03-01"] * 3, people_number=2, local_constraint=constraint, budget=0)


def test_transport_never_mixes_a_car_with_flights_or_taxis():
    flight, car, taxi = Option("F1", 50), Option("", 10), Option("", 120)
    only_flight = {"flight": flight}
    both = {"flight": Option("F2", 400), "self-driving": car, "taxi": taxi}
    # The second leg alone would be cheapest by car, but the first can only be flown.
    assert choose_transport(_query(), [only_flight, both]) == [("flight", flight), ("taxi", taxi)]
    # With roads both ways, driving the whole trip wins.
    assert choose_transport(_query(), [both, both]) == [("self-driving", car), ("self-driving", car)]
    assert choose_transport(_query(transportation="no self-driving"), [both, both]) == [("taxi", taxi), ("taxi", taxi)]
    assert choose_transport(_query(transportation="no flight"), [only_flight, both]) is None


def test_filters_show_the_rows_the_cap_hides(real_sandbox):
    capped = TravelTools(real_sandbox, row_cap=5)
    tools = {t.name: t for t in capped.as_tools()}
    # A city whose five cheapest stays have no shared room, though it has one.
    hidden = [
        c
        for (c,), rows in capped.hotels.items()
        if any(r["room_type"] == "Shared room" for r in rows)
        and "Shared room" not in tools["SearchAccommodation"].execute({"city": c}).content
    ]
    assert hidden
    city = hidden[0]
    shown = parse_hotels(tools["SearchAccommodation"].execute({"city": city, "room_type": "shared room", "nights": "30"}).content)
    assert shown and all(h.extra[0] == "Shared room" for h in shown)
    fits = parse_hotels(tools["SearchAccommodation"].execute({"city": city, "room_type": "not shared room", "house_rule": "smoking", "nights": "2"}).content)
    assert fits and all(ROOM_TYPE_OK["not shared room"](room) and nights <= 2 and "No smoking" not in rules for room, nights, _, rules in (h.extra for h in fits))
    food = parse_restaurants(tools["SearchRestaurant"].execute({"city": city, "cuisine": "Chinese"}).content)
    assert food and all("Chinese" in r.extra for r in food)
    assert not tools["SearchAccommodation"].execute({"city": city, "room_type": "suite"}).ok


def test_a_one_city_trip_first_tries_the_simple_plan(synthetic_sandbox):
    """On the default synthetic world the expert's first calls are the simple plan's, and where that plan works, all of them."""
    spec = SynthesisSpec(sizes={"train": 150, "validation": 0, "test": 0})
    queries = Synthesizer(synthetic_sandbox, spec).run()["train"]
    tools = {t.name: t for t in TravelTools(synthetic_sandbox, row_cap=5).as_tools()}
    expert, simple = Expert(0.1, 1, 0.0), 0
    for q in queries:
        calls, answer = play(expert.script(q, random.Random(q.idx)), tools)
        rng = random.Random(q.idx)
        first_calls, first = play(expert._first_try(q, [q.dest], ToolFacts(q, None), rng), tools)
        assert calls[: len(first_calls)] == first_calls
        if first.ok:
            simple += 1
            assert calls == first_calls and answer.text == expert.finish(first, rng).text
            assert all(set(args) <= {"city", "departure", "destination", "date", "mode"} for _, args in calls)
    assert simple / len(queries) >= 0.9
