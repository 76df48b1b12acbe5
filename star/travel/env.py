"""TravelEnv: a TravelPlanner episode in the sandbox, as a ToolEnv."""

from __future__ import annotations

from star.env.core import ToolEnv
from star.env.faults import with_faults
from star.travel.world.query import Query
from star.travel.world.tools import TravelTools

# The tools are listed here in one line with their required arguments, so a
# small model needs no JSON schemas in its prompt (they cost hundreds of
# tokens); models that expect native tool schemas get them, optional filters
# included, from `tool_schemas()`. The built-in model is brittle to this text:
# a line that also listed the optional filters cut its SFT final pass on
# validation from about 70% to 20%.
SYSTEM_PROMPT = """You plan trips with tools. Think in <think>...</think>, call one tool as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, and end with the plan in <answer>...</answer>, one block per day:
Day 1: from A to B
Transport: Flight F123 | Self-driving | Taxi | -
Breakfast: name | -
Attractions: name; name
Lunch: name
Dinner: name
Stay: name | -
Tools: SearchFlight{departure, destination, date}, GoogleDistanceMatrix{departure, destination, mode}, SearchAccommodation{city}, SearchRestaurant{city}, SearchAttraction{city}, SearchCity{state}."""


class TravelEnv(ToolEnv):
    system_prompt = SYSTEM_PROMPT

    def __init__(self, tools: TravelTools, max_turns: int = 12, fault_rate: float = 0.0, seed: int = 0):
        super().__init__(with_faults(tools.as_tools(), fault_rate, seed), max_turns=max_turns)

    def prompt(self, task: Query) -> str:
        return task.query

    @property
    def query(self) -> Query:
        return self.task
