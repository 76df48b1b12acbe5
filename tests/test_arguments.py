"""Argument accuracy per slot and the counterfactual probe, on the expert's own calls."""

import random
import re
from collections import Counter
from datetime import date

import pytest

from star.travel.evaluation.arguments import SLOTS, accuracy, counterfactual, slot_counts
from star.travel.planner.expert import Expert
from star.travel.world.synthesize import SynthesisSpec, Synthesizer
from star.travel.world.tools import TravelTools


@pytest.fixture(scope="module", params=["synthetic", "travelplanner"])
def world(request, synthetic_sandbox, real_sandbox):
    sandbox = synthetic_sandbox if request.param == "synthetic" else real_sandbox
    spec = SynthesisSpec(seed=2, sizes={"train": 40, "validation": 0, "test": 12}, days={3: 1.0, 5: 1.0, 7: 1.0})
    splits = Synthesizer(sandbox, spec).run()
    tools = TravelTools(sandbox, row_cap=5)
    return sandbox, tools, splits["train"], splits["test"]


def expert_calls(query, tools: TravelTools) -> list[dict]:
    by_name = {t.name: t for t in tools.as_tools()}
    script = Expert(mistake_rate=0.0).script(query, random.Random(0))
    calls, call = [], next(script)
    try:
        while True:
            calls.append({"name": call.name, "arguments": call.arguments})
            call = script.send(by_name[call.name].execute(call.arguments).content)
    except StopIteration:
        return calls


def moved(world):
    sandbox, tools, train, test = world
    seen = {(q.org, q.dest, q.date[0]) for q in train}
    origins = sorted({q.org for q in train})
    first, last = date.fromisoformat(tools.first_date), date.fromisoformat(tools.last_date)
    rng = random.Random(0)
    return seen, [counterfactual(q, seen, origins, first, last, rng) for q in test]


def test_the_expert_takes_every_argument_from_its_query(world):
    sandbox, tools, _, test = world
    counts = sum((slot_counts(q, expert_calls(q, tools), sandbox) for q in test), Counter())
    scores = accuracy(counts, "args")
    assert {"args/departure", "args/destination", "args/date", "args/city", "args/all"} <= set(scores)
    assert scores["args/stale"] == 0.0 and scores["args/n"] > 0
    assert all(v == 1.0 for k, v in scores.items() if k not in ("args/stale", "args/n")), scores


def test_counterfactual_queries_move_origin_and_dates_and_nothing_else(world):
    _, _, _, test = world
    seen, queries = moved(world)
    for old, new in zip(test, queries):
        assert new.org != old.org and new.org not in old.query and new.org in new.query
        assert (new.org, new.dest, new.date[0]) not in seen
        assert new.date[0] != old.date[0] and set(re.findall(r"\d{4}-\d{2}-\d{2}", new.query)) == {new.date[0], new.date[-1]}
        assert old.org not in new.query
        assert new.model_dump(exclude={"org", "date", "query"}) == old.model_dump(exclude={"org", "date", "query"})
    assert counterfactual(test[0], seen, sorted({q.org for q in test}), date(2022, 3, 1), date(2022, 3, 31), random.Random(5)) == counterfactual(
        test[0], seen, sorted({q.org for q in test}), date(2022, 3, 1), date(2022, 3, 31), random.Random(5)
    )


def test_calls_that_ignore_the_new_values_count_as_stale(world):
    sandbox, tools, _, test = world
    _, queries = moved(world)
    followed, ignored = Counter(), Counter()
    for old, new in zip(test, queries):
        followed += slot_counts(new, expert_calls(new, tools), sandbox, old=old)
        ignored += slot_counts(new, expert_calls(old, tools), sandbox, old=old)
    assert accuracy(followed, "cf")["cf/all"] == 1.0 and accuracy(followed, "cf")["cf/stale"] == 0.0
    stale = accuracy(ignored, "cf")
    # The expert's calls for the old query use only its values, so every wrong argument is a stale one.
    assert stale["cf/date"] < 0.5 and stale["cf/departure"] < 1.0 and stale["cf/stale"] > 0.1, stale
    assert abs(stale["cf/stale"] + stale["cf/all"] - 1.0) < 1e-9
    assert set(SLOTS) >= {k.split("/")[1] for k in stale if k not in ("cf/all", "cf/stale", "cf/n")}
