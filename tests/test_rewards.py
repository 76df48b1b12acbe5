import pytest

from star.travel.commonsense import COMMONSENSE
from star.travel.evaluate import PlanEvaluation
from star.travel.hard import HARD
from star.travel.rewards import (
    CURRICULUM,
    MACRO,
    SUCCESS,
    SUM,
    curriculum_kind,
    macro_reward,
    outcome_reward,
    success_reward,
    sum_reward,
)


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


def test_macro_and_success():
    assert [macro_reward(e) for e in (PERFECT, PARTIAL, HARD_ONLY_FAILS, UNGATED)] == [1.0, 0.0, 0.5, 0.0]
    assert macro_reward(evaluation(cs_fail=("within_sandbox",))) == 0.5
    assert [success_reward(e) for e in (PERFECT, PARTIAL, HARD_ONLY_FAILS, UNGATED)] == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("kind", [SUM, MACRO, SUCCESS, CURRICULUM])
def test_format_error_or_no_plan_gets_zero(kind):
    assert outcome_reward(kind, None) == 0.0
    assert outcome_reward(kind, evaluation(delivered=False)) == 0.0
    assert outcome_reward(kind, PERFECT) == 1.0


def test_outcome_reward_dispatches():
    assert outcome_reward("SUM", PARTIAL) == sum_reward(PARTIAL)
    assert outcome_reward(MACRO, HARD_ONLY_FAILS) == 0.5
    assert outcome_reward(SUCCESS, HARD_ONLY_FAILS) == 0.0
    with pytest.raises(ValueError):
        outcome_reward("nope", PERFECT)


def test_curriculum_switches_at_a_step():
    kwargs = dict(total_steps=1000, switch_at=300)
    assert outcome_reward(CURRICULUM, HARD_ONLY_FAILS, step=299, **kwargs) == pytest.approx(0.4)
    assert outcome_reward(CURRICULUM, HARD_ONLY_FAILS, step=300, **kwargs) == 0.0
    assert curriculum_kind(299, **kwargs) == SUM and curriculum_kind(300, **kwargs) == SUCCESS


def test_curriculum_switches_at_a_fraction():
    assert curriculum_kind(49, total_steps=100, switch_at=0.5) == SUM
    assert curriculum_kind(50, total_steps=100, switch_at=0.5) == SUCCESS
    assert curriculum_kind(0, total_steps=100, switch_at=0.0) == SUCCESS
    assert curriculum_kind(99, total_steps=100, switch_at=1.0) == SUM
    # an int is a step, a float a fraction: 1 and 1.0 differ
    assert curriculum_kind(5, total_steps=100, switch_at=1) == SUCCESS
    assert curriculum_kind(5, total_steps=100, switch_at=1.0) == SUM
    with pytest.raises(ValueError):
        curriculum_kind(0, total_steps=100, switch_at=1.5)
    with pytest.raises(TypeError):
        curriculum_kind(0, total_steps=100, switch_at=True)


def test_rewards_stay_in_unit_interval():
    for e in (PERFECT, PARTIAL, HARD_ONLY_FAILS, UNGATED, TWO_OF_FIVE_FAIL, None):
        for kind in (SUM, MACRO, SUCCESS):
            assert 0.0 <= outcome_reward(kind, e) <= 1.0
