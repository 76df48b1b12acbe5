import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from star.env.core import Tool, ToolEnv
from star.env.faults import FAULTS, FaultyTool, with_faults
from star.env.parse import parse_action
from star.travel.env import TravelEnv
from star.travel.world.query import Query
from star.travel.world.tools import TravelTools


def call(name, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_parse_think_call_answer():
    action = parse_action("<think>need food</think>\n" + call("SearchRestaurant", city="Dallas"))
    assert action.think == "need food"
    assert [(c.name, c.arguments) for c in action.tool_calls] == [("SearchRestaurant", {"city": "Dallas"})]
    assert action.answer is None and action.error is None
    assert parse_action("<think>done</think><answer>Day 1: Dallas</answer>").answer == "Day 1: Dallas"
    # a call cut off at the stop string still parses
    cut = parse_action('<tool_call>{"name": "SearchCity", "arguments": {"state": "Texas"}}')
    assert cut.tool_calls[0].arguments == {"state": "Texas"}
    # arguments sent as a JSON string
    assert parse_action('<tool_call>{"name": "X", "arguments": "{\\"a\\": 1}"}</tool_call>').tool_calls[0].arguments == {"a": 1}


@pytest.mark.parametrize(
    "text, error",
    [
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
        ('<tool_call>["SearchCity"]</tool_call>', '"name"'),
        ('<tool_call>{"name": "X", "arguments": "{oops"}</tool_call>', "arguments are not valid JSON"),
    ],
)
def test_parse_reports_bad_calls(text, error):
    action = parse_action(text)
    assert action.tool_calls == [] and error in action.error


tags = st.sampled_from(["<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>", "{", "}", '"name"', ":", '"arguments"', "[", "]", "\\", '"'])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(tags, st.text(max_size=12)), max_size=30).map("".join))
def test_parser_never_raises(text):
    action = parse_action(text)
    assert action.answer is not None or action.error is not None or isinstance(action.tool_calls, list)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8), lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=10))
def test_env_step_never_raises_on_any_arguments(synthetic_sandbox, arguments):
    env = TravelEnv(TravelTools(synthetic_sandbox))
    env.reset(Query(org="A", dest="B", days=3, visiting_city_number=1, date=["2022-03-01"], people_number=1, budget=1))
    for name in ("SearchFlight", "SearchCity", "Nope"):
        result = env.step(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")
        assert isinstance(result.observation, str) and not result.done


def test_fault_rate_within_tolerance(synthetic_sandbox):
    city = synthetic_sandbox.cities["city"][0]
    tool = FaultyTool(Tool(TravelTools(synthetic_sandbox).SearchRestaurant), rate=0.1, rng=random.Random(7))
    results = [tool.execute({"city": city}) for _ in range(20_000)]
    faults = [r for r in results if r.kind == "fault"]
    # binomial sd = sqrt(0.1 * 0.9 / 20000) ~ 0.0021; allow 5 sd
    assert abs(len(faults) / len(results) - 0.1) < 0.011
    assert {r.content for r in faults} == set(FAULTS)
    assert all(r.ok for r in results if r.kind != "fault")


def test_faults_are_seeded(synthetic_sandbox):
    def pattern(seed):
        tools = with_faults(TravelTools(synthetic_sandbox).as_tools(), 0.3, seed)
        return [tools[3].execute({"state": "x"}).kind for _ in range(200)]

    assert pattern(1) == pattern(1) != pattern(2)
    assert with_faults(["t"], 0.0, 1) == ["t"]


@pytest.fixture
def env_and_query(synthetic_sandbox):
    cities = synthetic_sandbox.cities
    org, dest = cities["city"][0], cities["city"][5]
    query = Query(org=org, dest=dest, days=3, visiting_city_number=1, date=["2022-03-01", "2022-03-02", "2022-03-03"], people_number=1, budget=900, query=f"Plan 3 days from {org} to {dest}.")
    return TravelEnv(TravelTools(synthetic_sandbox), max_turns=4), query


def test_travel_episode_records_steps_and_answer(env_and_query):
    env, query = env_and_query
    assert env.reset(query) == query.query
    first = env.step("<think>look</think>" + call("SearchRestaurant", city=query.dest))
    assert first.info["calls"] == ["ok"] and not first.done and first.messages[0]["role"] == "tool"
    again = env.step(call("SearchRestaurant", city=query.dest))
    assert again.info["calls"] == ["repeated"]
    bad = env.step("I am not sure")
    assert bad.info["kind"] == "invalid" and bad.messages[0]["role"] == "user"
    end = env.step("<answer>Day 1: from A to B</answer>")
    assert end.done and env.answer == "Day 1: from A to B" and not env.truncated
    roles = [m["role"] for m in env.history]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user", "assistant"]
    assert env.step("more?").info["kind"] == "after_done"


def test_episode_truncates_at_max_turns(env_and_query):
    env, query = env_and_query
    env.reset(query)
    results = [env.step(call("SearchCity", state="nowhere")) for _ in range(4)]
    assert [r.done for r in results] == [False, False, False, True]
    assert env.truncated and env.answer is None and results[-1].info["truncated"]


def test_unknown_tool_and_broken_tool_are_observations():
    def Boom(x: str) -> str:
        """Always fails.

        Args:
            x: anything
        """
        raise RuntimeError("kaput")

    env = ToolEnv([Tool(Boom)])
    env.reset("task")
    assert env.step(call("Boom", x="1")).info["calls"] == ["error"]
    assert env.step(call("Missing")).info["calls"] == ["unknown_tool"]
