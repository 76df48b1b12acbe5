import random
import re

import pytest

from star.train.filtering import quotas
from star.travel.evaluation.evaluate import evaluate_plan
from star.travel.planner.expert import Expert, parse_hotels, parse_restaurants, run_on_tools
from star.travel.specs import SynthesisSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.tools import TravelTools

ALL_DAYS = {3: 1.0, 5: 1.0, 7: 1.0}


@pytest.fixture(scope="module", params=["synthetic", "travelplanner"])
def sandbox(request, synthetic_sandbox, real_sandbox):
    return synthetic_sandbox if request.param == "synthetic" else real_sandbox


@pytest.fixture(scope="module")
def synthesized(sandbox):
    spec = SynthesisSpec(seed=1, sizes={"train": 60, "validation": 15, "test": 30}, days=ALL_DAYS)
    synthesizer = Synthesizer(sandbox, spec)
    return synthesizer, synthesizer.run()


def test_sizes_mix_and_disjoint_splits(synthesized):
    _, splits = synthesized
    assert {k: len(v) for k, v in splits.items()} == {"train": 60, "validation": 15, "test": 30}
    assert [q.level for q in splits["test"]].count("easy") == 12  # 4:3:3 of 30
    keys = [(q.org, q.dest, tuple(q.date), q.people_number, str(q.local_constraint)) for s in splits.values() for q in s]
    assert len(keys) == len(set(keys))
    ids = [q.idx for s in splits.values() for q in s]
    assert len(ids) == len(set(ids))


def test_levels_follow_travelplanner(synthesized):
    _, splits = synthesized
    for q in (q for s in splits.values() for q in s):
        set_keys = {k for k, v in q.local_constraint.items() if v}
        assert q.days == {1: 3, 2: 5, 3: 7}[q.visiting_city_number]
        if q.level == "easy":
            assert q.people_number == 1 and not set_keys
        elif q.level == "medium":
            assert len(set_keys) == 1 and "transportation" not in set_keys
        else:
            assert "transportation" in set_keys and len(set_keys) == 3


def test_text_states_the_structured_fields(synthesized):
    _, splits = synthesized
    for q in (q for s in splits.values() for q in s):
        text = q.query
        for value in (q.org, q.dest, q.date[0], q.date[-1], f"${q.budget}"):
            assert value in text, (value, text)
        people = re.search(r"(\d+) (people|person)", text)
        assert people and int(people.group(1)) == q.people_number
        for cuisine in q.local_constraint.get("cuisine") or []:
            assert cuisine in text


def test_every_query_is_feasible_and_the_expert_passes(sandbox, synthesized):
    _, splits = synthesized
    tools = {t.name: t for t in TravelTools(sandbox).as_tools()}
    index = index_for(sandbox)
    queries = [q for s in splits.values() for q in s]
    expert = Expert(mistake_rate=0.0, top_k=3, upgrade_prob=0.5)
    passed = mispriced = 0
    for q in queries:
        answer, _ = run_on_tools(expert.script(q, random.Random(q.idx)), tools)
        evaluation = evaluate_plan(q, answer.plan, index)
        passed += evaluation.final_pass
        # The official evaluator prices a name by its first row in the table; when a city lists
        # a chain twice, the capped tools may show only the other row. Nothing else may fail.
        if not evaluation.final_pass:
            assert answer.ok and evaluation.failed == ["budget"] and evaluation.cost != answer.cost, (q, evaluation.failed)
            mispriced += 1
    assert mispriced / len(queries) <= 0.03 and passed + mispriced == len(queries)


def test_budget_is_never_below_the_cheapest_plan(synthesized):
    synthesizer, splits = synthesized
    cheapest = Expert(mistake_rate=0.0, top_k=1, upgrade_prob=0.0)
    for q in splits["test"]:
        answer, _ = run_on_tools(cheapest.script(q, random.Random(0)), synthesizer.tools)
        assert answer.cost <= q.budget


def test_synthesis_is_deterministic(synthetic_sandbox):
    spec = SynthesisSpec(seed=5, sizes={"train": 20, "validation": 0, "test": 5}, days=ALL_DAYS)
    a = Synthesizer(synthetic_sandbox, spec).run()
    b = Synthesizer(synthetic_sandbox, spec).run()
    assert [q.model_dump_json() for q in a["train"]] == [q.model_dump_json() for q in b["train"]]


def test_quotas_are_exact():
    assert quotas(10, {"easy": 4, "medium": 3, "hard": 3}) == {"easy": 4, "medium": 3, "hard": 3}
    assert sum(quotas(7, {"easy": 4, "medium": 3, "hard": 3}).values()) == 7
    assert quotas(5, {3: 1.0, 5: 0.0}) == {3: 5, 5: 0}


def test_expert_reads_observations(real_sandbox):
    tools = {t.name: t for t in TravelTools(real_sandbox, row_cap=3).as_tools()}
    hotels = parse_hotels(tools["SearchAccommodation"].execute({"city": "Laredo"}).content)
    assert hotels[0].name == "Lambe’s Vacation Rentals- Maspeth, Queens"
    assert hotels[0].cost == 164 and hotels[0].extra == ("Entire home/apt", 4, 3, "No smoking & No pets")
    food = parse_restaurants(tools["SearchRestaurant"].execute({"city": "Binghamton"}).content)
    assert (food[0].name, food[0].cost, food[0].extra) == ("Hoot", 10, ("Bakery", "Mexican", "Indian", "Fast Food"))


def test_keep_feasible_sets_budgets_from_the_solver_and_counts_the_expert(real_sandbox):
    assert SynthesisSpec().keep == "expert"
    spec = SynthesisSpec(seed=2, sizes={"train": 12, "validation": 0, "test": 0}, days=ALL_DAYS, keep="feasible")
    synthesizer = Synthesizer(real_sandbox, spec)
    queries = synthesizer.run()["train"]
    stats = synthesizer.stats
    assert len(queries) == 12 and stats["expert_solved"] + stats["expert_unsolved"] == 12
    assert sum(v for k, v in stats.items() if k.startswith("expert_solved_")) == stats["expert_solved"]
    for q in queries:
        answer = synthesizer.solver.solve(q)
        factor = spec.budget_factor[q.level]
        assert q.budget == max(answer.cost, -(-factor * answer.reference_cost // spec.budget_round) * spec.budget_round)
        assert evaluate_plan(q, answer.plan, synthesizer.index).final_pass
