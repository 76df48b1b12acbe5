"""The travel domain's params sections and paths (star/sections.py): no logic, so params load without importing the domain."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from star.endpoint import RETRIES_HELP, OpenAIEndpoint
from star.sections import Layout, Section

Level = Literal["easy", "medium", "hard"]  # a query's difficulty: which local constraints it states


class WorldSpec(BaseModel):
    """Size and ranges of the synthetic world."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="seed of the world generator")
    states: int = Field(4, ge=1, le=50, description="number of states")
    cities_per_state: int = Field(4, ge=1, le=50, description="cities in each state")
    accommodations_per_city: int = Field(4, ge=1, le=100, description="accommodations in each city")
    restaurants_per_city: int = Field(6, ge=3, le=200, description="restaurants in each city")
    attractions_per_city: int = Field(4, ge=1, le=100, description="attractions in each city")
    start_date: date = Field(date(2022, 3, 1), description="first date with flights (YYYY-MM-DD)")
    num_dates: int = Field(14, ge=3, le=366, description="consecutive dates with flights, from start_date")
    flight_route_prob: float = Field(0.6, ge=0.0, le=1.0, description="chance that a city pair has a flight route")
    flights_per_route_day: int = Field(2, ge=1, le=10, description="flights on a route each date")
    flight_price: tuple[int, int] = Field((60, 400), description="[low, high] price of a flight ticket, per person")
    hotel_price: tuple[int, int] = Field((40, 300), description="[low, high] price of an accommodation, per night")
    meal_cost: tuple[int, int] = Field((8, 60), description="[low, high] average cost of a meal, per person")
    map_size_km: float = Field(1200.0, gt=0, description="side of the square map the cities lie on, in km")

    @model_validator(mode="after")
    def _ranges(self) -> WorldSpec:
        for name in ("flight_price", "hotel_price", "meal_cost"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name} must be [low, high] with 0 < low <= high, got [{low}, {high}]")
        return self


class SynthesisSpec(BaseModel):
    """Query synthesis: split sizes, difficulty and trip-length mix, budgets."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="seed of the query composer")
    sizes: dict[Literal["train", "validation", "test"], int] = Field(
        default_factory=lambda: {"train": 1500, "validation": 100, "test": 200},
        description="queries per split: train, validation, test",
    )
    levels: dict[Level, float] = Field(
        default_factory=lambda: {"easy": 4, "medium": 3, "hard": 3},
        description="relative weights of the difficulty levels easy, medium, hard",
    )
    days: dict[Literal[3, 5, 7], float] = Field(
        default_factory=lambda: {3: 1.0, 5: 0.0, 7: 0.0},
        description="relative weights of the trip lengths (3 days = 1 city, 5 = 2, 7 = 3)",
    )
    people: tuple[int, int] = Field((2, 8), description="[low, high] travellers of medium and hard queries, within 1..8; easy is one person")
    budget_factor: dict[Level, float] = Field(
        default_factory=lambda: {"easy": 1.0, "medium": 0.75, "hard": 0.5},
        description="budget per level as a share of a typical plan's cost, never below the cheapest plan found",
    )
    budget_round: int = Field(50, ge=1, description="budgets are rounded up to a multiple of this, in dollars")
    max_attempts: int = Field(100, ge=1, description="tries per query; a slot still empty after them is counted as unfilled")
    keep: Literal["expert", "feasible"] = Field(
        "expert",
        description="which queries are kept and whose plan sets the budget: expert = those the scripted expert solves through the tools;"
        " feasible = those the solver over the full sandbox solves (the stats count how many the expert solves too)",
    )
    source: Literal["synthesized", "official"] = Field(
        "synthesized",
        description="synthesized: every split is composed here | official: the test split is the published TravelPlanner"
        " validation or test query file at `path` (sizes.test is then unused); train and validation stay synthesized",
    )
    path: str = Field(
        "", description="the published query file (CSV or parquet, as distributed on the hub), read when source is official"
    )

    @model_validator(mode="after")
    def _check(self) -> SynthesisSpec:
        for name in ("levels", "days"):
            weights = getattr(self, name)
            if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
                raise ValueError(f"{name} weights must be >= 0 with a positive sum")
        low, high = self.people
        if not 1 <= low <= high <= 8:
            raise ValueError("people must be [low, high] within 1..8")
        if self.source == "official" and not self.path.strip():
            raise ValueError("source official needs path: the published query file")
        return self


class ParaphraseSpec(OpenAIEndpoint):
    """Optional rewording of the synthesized queries by any OpenAI-compatible model."""

    enabled: bool = Field(False, description="reword the template texts; false keeps them as composed")
    model: str = Field("gpt-4o-mini", description="the model name sent to the server")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling temperature of the rewording")
    timeout: float = Field(30.0, gt=0, description="seconds to wait for one reply")
    retries: int = Field(2, ge=0, le=10, description=RETRIES_HELP)
    concurrency: int = Field(4, ge=1, le=64, description="requests in flight at once")


# The named reward functions of star/travel/rewards.py, which the reward section weighs.
TravelReward = Literal["sum", "complete_sum", "kept_sum", "macro", "success", "curriculum", "process"]


class TravelRewardParams(BaseModel):
    """Travel's GRPO reward: the sum of weight x function over the named functions of star/travel/rewards.py."""

    model_config = ConfigDict(extra="forbid")

    weights: dict[TravelReward, float] = Field(
        default_factory=lambda: {"sum": 1.0, "complete_sum": 0.0, "kept_sum": 0.0, "macro": 0.0, "success": 0.0, "curriculum": 0.0, "process": 0.1},
        description="weight of each reward function (0: not computed): sum (the mean of the plan's five official rates) | complete_sum "
        "(sum for a plan that passes complete_information, else 0) | kept_sum (sum for a plan that keeps every local "
        "constraint the query states, checked even where the official gate skips them, else 0) | macro "
        "(commonsense-all and hard-all pass, averaged) | success (final pass) | curriculum (sum until switch_at, then success) | "
        "process (Agent-R1's mean value of the episode's calls, clipped to [-1, 1])",
    )
    switch_at: float | int = Field(0.5, description="curriculum: the step (int) or fraction of the steps (float) where sum turns into success")
    informative: float = Field(1.0, description="process: value of a valid call (ok or empty result)")
    repeated: float = Field(-0.5, description="process: value of a call repeated with the same tool and arguments")
    invalid: float = Field(-1.0, description="process: value of an invalid call: bad format, arguments or tool")
    failed: float = Field(0.0, description="process: value of a failed call: tool error or injected fault, not the agent's fault")

    @model_validator(mode="after")
    def _switch(self) -> TravelRewardParams:
        if isinstance(self.switch_at, float) and not 0 <= self.switch_at <= 1:
            raise ValueError("switch_at as a fraction must lie in [0, 1]")
        return self


class WorldParams(Section):
    """Where the sandbox comes from."""

    source: Literal["synthetic", "travelplanner"] = Field(
        "synthetic", description="synthetic: a seeded generated world | travelplanner: the official database"
    )
    database: str = Field(
        "../shared/data/travelplanner/database", description="a directory in the official TravelPlanner CSV layout, read when source is travelplanner"
    )
    synthetic: WorldSpec = Field(default_factory=WorldSpec, description="size and ranges of the synthetic world")


class SynthesizeParams(SynthesisSpec):
    """Query synthesis: split sizes, difficulty and trip-length mix, budgets."""

    paraphrase: ParaphraseSpec = Field(default_factory=ParaphraseSpec, description="optional rewording by any OpenAI-compatible model")


class OpenAITeacherParams(OpenAIEndpoint):
    model: str = Field("deepseek-chat", description="the model name sent to the server")
    temperature: float = Field(0.7, ge=0.0, le=2.0, description="sampling temperature")
    max_tokens: int = Field(1024, ge=16, description="tokens per reply")
    concurrency: int = Field(4, ge=1, le=256, description="episodes played at once")


class TeacherParams(Section):
    """Who solves the training queries in the sandbox."""

    kind: Literal["expert", "openai"] = Field("expert", description="expert: the scripted planner | openai: any OpenAI-compatible model")
    samples: int = Field(1, ge=1, le=64, description="trajectories per query")
    seed: int = Field(0, description="seed of the episodes")
    mistake_rate: float = Field(0.1, ge=0.0, le=1.0, description="expert: share of plans spoiled on purpose, so filtering has work to do")
    top_k: int = Field(1, ge=1, le=20, description="expert: choose among the k cheapest good options")
    upgrade_prob: float = Field(0.0, ge=0.0, le=1.0, description="expert: chance to upgrade a slot within budget")
    fault_rate: float = Field(0.0, ge=0.0, le=1.0, description="share of tool calls that fail while distilling: the teacher's recoveries become SFT data")
    openai: OpenAITeacherParams = Field(default_factory=OpenAITeacherParams, description="the server and sampling of kind: openai")


class FilterParams(Section):
    """Which trajectories become SFT data."""

    require: Literal["final", "commonsense", "delivered"] = Field(
        "final", description="what a kept plan must pass: final (every constraint) | commonsense | delivered (any plan)"
    )
    max_tokens: int = Field(1536, ge=64, description="longest trajectory kept, counted with the policy's tokenizer, tools included")
    examples: int = Field(1000, ge=1, description="trajectories in the SFT set (named so because DVC's run cache leaves any key called size out of its key)")
    levels: dict[Level, float] = Field(
        default_factory=lambda: {"easy": 4, "medium": 3, "hard": 3}, description="relative weights of the levels easy, medium, hard in the SFT set"
    )
    seed: int = Field(0, description="seed of the draw")
    rename_copies: int = Field(
        0,
        ge=0,
        description="after each kept trajectory, this many copies with its cities, places, flight numbers and dates renamed consistently "
        "(star/travel/planner/rename.py), so the student must copy them from its context; 0 = none",
    )
    rename_within_world: bool = Field(
        False,
        description="renamed copies swap flight numbers among the world's own and keep the dates (else: numbers no flight has, dates "
        "shifted), so a tokenizer with one token per flight number and date (model.tiny.whole_identifiers) reads each as one token",
    )


class LLMFormatterParams(OpenAIEndpoint):
    model: str = Field("gpt-4o-mini", description="the model name sent to the server")
    timeout: float = Field(60.0, gt=0, description="seconds to wait for one reply")


class FormatParams(Section):
    """Itinerary text to the official plan JSON."""

    kind: Literal["rules", "llm"] = Field("rules", description="rules: parse the itinerary | llm: ask an OpenAI-compatible model")
    llm: LLMFormatterParams = Field(default_factory=LLMFormatterParams, description="the server of kind: llm")


class EvaluateParams(Section):
    mode: Literal["official", "strict"] = Field(
        "official", description="official: the TravelPlanner evaluation's verdicts, quirks included | strict: the intended rules"
    )


SECTIONS = {
    "world": WorldParams,
    "synthesize": SynthesizeParams,
    "teacher": TeacherParams,
    "filter": FilterParams,
    "reward": TravelRewardParams,
    "format": FormatParams,
    "evaluate": EvaluateParams,
}
LAYOUT = Layout("", Path("data/world"), Path("data/queries"), Path("data/trajectories"), Path("data/sft"), Path("models"), Path("data/infer"), Path("reports"))
SFT_SET_LIMITS = ("filter.max_tokens",)
TRAINED = ("grpo", "sft")
METRICS = ("final_pass_rate", "delivery_rate", "commonsense_micro", "commonsense_macro", "hard_micro", "hard_macro")  # TravelPlanner's
LEVELS = get_args(Level)
