import pytest

from star.train.rubric import Rubric
from star.travel.evaluation.commonsense import COMMONSENSE
from star.travel.evaluation.evaluate import PlanEvaluation
from star.travel.evaluation.hard import HARD
from star.travel.rewards import GradedPlan, complete_sum_reward, curriculum_reward, macro_reward, reward_functions, success_reward, sum_reward, switch_step
from star.travel.specs import TravelRewardParams

OUTCOMES = ("sum", "complete_sum", "macro", "success", "curriculum")


def evaluation(cs_fail=(), hard_fail=(), hard_set=("budget",), hard=True, delivered=True) -> PlanEvaluation:
    commonsense = {k: k not in cs_fail for k in COMMONSENSE}
    verdicts = {k: (k not in hard_fail) if hard else None for k in HARD}
    return PlanEvaluation(
        idx=1, mode="official", delivered=delivered, commonsense=commonsense, hard=verdicts, hard_set=hard_set
    )


PERFECT = evaluation(hard_set=HARD)
# 6/8 commonsense, budget and cuisine set, cuisine fails: 1/2 hard
PARTIAL = evaluation(
    cs_fail=("diverse_restaurants", "within_current_city"), hard_fail=("cuisine",), hard_set=("budget", "cuisine")
)
HARD_ONLY_FAILS = evaluation(hard_fail=("budget",))
# commonsense fails, hard not evaluated (official gate)
UNGATED = evaluation(cs_fail=("within_sandbox",), hard=False)
TWO_OF_FIVE_FAIL = evaluation(hard_fail=("room_type", "transportation"), hard_set=HARD)


def test_sum_is_the_mean_of_five_rates():
    assert sum_reward(PERFECT) == 1.0
    assert sum_reward(PARTIAL) == pytest.approx((6 / 8 + 0 + 1 / 2 + 0 + 0) / 5)
    assert sum_reward(HARD_ONLY_FAILS) == pytest.approx((1 + 1 + 0 + 0 + 0) / 5)
    assert sum_reward(UNGATED) == pytest.approx((7 / 8 + 0 + 0 + 0 + 0) / 5)
    assert sum_reward(TWO_OF_FIVE_FAIL) == pytest.approx((1 + 1 + 3 / 5 + 0 + 0) / 5)


def test_an_incomplete_plan_earns_nothing_under_complete_sum():
    cut_short = evaluation(cs_fail=("complete_information",))
    assert sum_reward(cut_short) == pytest.approx((7 / 8 + 0 + 1 + 1 + 0) / 5)  # what sum pays it
    assert complete_sum_reward(cut_short) == 0.0
    assert complete_sum_reward(PARTIAL) == sum_reward(PARTIAL) and complete_sum_reward(PERFECT) == 1.0


def test_macro_and_success():
    assert [macro_reward(e) for e in (PERFECT, PARTIAL, HARD_ONLY_FAILS, UNGATED)] == [1.0, 0.0, 0.5, 0.0]
    assert macro_reward(evaluation(cs_fail=("within_sandbox",))) == 0.5
    assert [success_reward(e) for e in (PERFECT, PARTIAL, HARD_ONLY_FAILS, UNGATED)] == [1.0, 0.0, 0.0, 0.0]


def scorer_functions(**weights):
    from star.travel.rewards import reward_functions

    return reward_functions(TravelRewardParams(weights=weights), total_steps=1000)


def graded(evaluation, step=0):
    return GradedPlan(query=None, env=None, evaluation=evaluation, step=step)


@pytest.mark.parametrize("name", OUTCOMES)
def test_format_error_or_no_plan_gets_zero(name):
    function = scorer_functions()[name]
    assert function(graded(None)) == 0.0
    assert function(graded(evaluation(delivered=False))) == 0.0
    assert function(graded(PERFECT)) == 1.0


def test_curriculum_switches_at_a_step():
    kwargs = dict(total_steps=1000, switch_at=300)
    assert curriculum_reward(HARD_ONLY_FAILS, step=299, **kwargs) == pytest.approx(0.4)
    assert curriculum_reward(HARD_ONLY_FAILS, step=300, **kwargs) == 0.0
    function = reward_functions(TravelRewardParams(switch_at=300), total_steps=1000)["curriculum"]
    assert function(graded(HARD_ONLY_FAILS, 299)) == pytest.approx(0.4) and function(graded(HARD_ONLY_FAILS, 300)) == 0.0


def test_curriculum_switches_at_a_fraction():
    assert switch_step(100, 0.5) == 50 and switch_step(100, 0.0) == 0 and switch_step(100, 1.0) == 100
    # an int is a step, a float a fraction: 1 and 1.0 differ
    assert switch_step(100, 1) == 1 and switch_step(100, 1.0) == 100
    with pytest.raises(ValueError):
        switch_step(100, 1.5)
    with pytest.raises(TypeError):
        switch_step(100, True)


def test_rewards_stay_in_unit_interval():
    functions = scorer_functions()
    for e in (PERFECT, PARTIAL, HARD_ONLY_FAILS, UNGATED, TWO_OF_FIVE_FAIL, None):
        for name in OUTCOMES:
            assert 0.0 <= functions[name](graded(e, step=700)) <= 1.0


def test_the_rubric_sums_weighted_functions_and_logs_each():
    rubric = Rubric({"a": lambda g: g * 2, "b": lambda g: 1.0, "c": lambda g: 1 / 0}, {"b": 0.5, "a": 1.0, "c": 0.0})
    assert rubric.score(3.0) == {"reward": 6.5, "a": 6.0, "b": 1.0}  # c weighs 0: never computed
    with pytest.raises(ValueError, match="unknown reward function d; the domain has: a, b, c"):
        Rubric({"a": abs, "b": abs, "c": abs}, {"d": 1.0})


def test_every_reward_the_params_name_is_a_function():
    from typing import get_args

    from star.qa.rewards import reward_functions as qa_functions
    from star.qa.specs import QAReward, QARewardParams
    from star.travel.specs import TravelReward

    assert list(scorer_functions()) == list(get_args(TravelReward)) == list(TravelRewardParams().weights)
    assert list(qa_functions(QARewardParams())) == list(get_args(QAReward)) == list(QARewardParams().weights)


def test_kept_sum_pays_nothing_for_breaking_a_stated_constraint(synthetic_sandbox):
    """Under sum, driving where the user will not drive outscores a flight with a mis-copied number
    (the gate leaves its hard constraints unscored); kept_sum turns that order round."""
    import re
    from dataclasses import replace

    from star.travel.evaluation.evaluate import evaluate_plan
    from star.travel.world.sandbox_index import index_for
    from tests.test_evaluate import build_world, make_plan, make_query

    index = index_for(synthetic_sandbox)
    kept_sum = scorer_functions(kept_sum=1.0)["kept_sum"]

    def score(world, query):
        plan = make_plan(world)
        g = GradedPlan(query, None, evaluate_plan(query, plan, index), 0, plan, index)
        return sum_reward(g.evaluation), kept_sum(g)

    drive = build_world(synthetic_sandbox, kind="drive")
    flight = build_world(synthetic_sandbox, kind="flight")
    number = re.search(r"Flight Number: (\S+),", flight.out_leg).group(1)
    miscopied = replace(flight, out_leg=flight.out_leg.replace(number, number[:-1] + ("0" if number[-1] != "0" else "1")))
    no_driving = {"transportation": "no self-driving"}

    drive_sum, drive_kept = score(drive, make_query(drive, local=no_driving))
    slip_sum, slip_kept = score(miscopied, make_query(miscopied, local=no_driving))
    assert drive_sum > slip_sum > 0  # the order sum teaches
    assert drive_kept == 0.0 and slip_kept == slip_sum  # the order kept_sum teaches
    assert score(drive, make_query(drive)) == (1.0, 1.0)  # nothing stated: kept_sum is sum
    assert score(flight, make_query(flight, local=no_driving)) == (1.0, 1.0)
