"""The QA domain's params section and paths (star/sections.py): no logic, so params load without importing the domain."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from star.sections import Layout, Section

SPLITS = ("train", "validation", "test")


class QAWorldSpec(BaseModel):
    """Size of the synthetic knowledge world."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="seed of the world generator")
    num_people: int = Field(200, ge=2, description="number of people")
    num_places: int = Field(40, ge=2, description="number of cities")
    num_countries: int = Field(6, ge=1, description="number of countries, at most num_places: each needs a capital")
    num_orgs: int = Field(60, ge=2, description="number of companies")
    name_syllables: int = Field(2, ge=2, le=4, description="syllables per name: two give about 230,000 names, larger worlds need three")

    @model_validator(mode="after")
    def _capitals(self) -> QAWorldSpec:
        if self.num_countries > self.num_places:
            raise ValueError(f"num_countries ({self.num_countries}) must not exceed num_places ({self.num_places}): every country needs a capital")
        return self


class QuestionSpec(BaseModel):
    """How many multi-hop questions to make, and of which hop counts and kinds."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(0, description="seed of the question composer (of the shuffle, for a public dataset)")
    sizes: dict[str, int] = Field(
        default_factory=lambda: {"train": 1000, "validation": 100, "test": 100},
        description="questions per split: train, validation, test",
    )
    hops: dict[int, float] = Field(
        default_factory=lambda: {2: 1.0, 3: 1.0, 4: 1.0},
        description="relative weights of the hop counts 2, 3 and 4 (passages an answer needs)",
    )
    kinds: dict[str, float] = Field(
        default_factory=lambda: {"bridge": 1.0, "comparison": 1.0},
        description="relative weights of the question kinds bridge and comparison",
    )

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: dict[str, int]) -> dict[str, int]:
        for split, n in value.items():
            if split not in SPLITS or n < 0:
                raise ValueError(f"sizes: {split}={n}; splits are {', '.join(SPLITS)} with sizes >= 0")
        return value

    @field_validator("hops")
    @classmethod
    def _hops(cls, value: dict[int, float]) -> dict[int, float]:
        if not value or any(h not in (2, 3, 4) or w < 0 for h, w in value.items()) or sum(value.values()) <= 0:
            raise ValueError(f"hops must weigh 2, 3 and 4 with weights >= 0, not all 0; got {value}")
        return value

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: dict[str, float]) -> dict[str, float]:
        if not value or any(k not in ("bridge", "comparison") or w < 0 for k, w in value.items()) or sum(value.values()) <= 0:
            raise ValueError(f"kinds must weigh bridge and comparison with weights >= 0, not all 0; got {value}")
        return value


# The named reward functions of star/qa/rewards.py, which the reward section weighs.
QAReward = Literal["em", "f1", "format", "process"]


class QARewardParams(BaseModel):
    """QA's GRPO reward: the sum of weight x function over the named functions of star/qa/rewards.py."""

    model_config = ConfigDict(extra="forbid")

    weights: dict[QAReward, float] = Field(
        default_factory=lambda: {"em": 0.0, "f1": 1.0, "format": 0.1, "process": 0.1},
        description="weight of each reward function (0: not computed): em (exact match of the answer, aliases count) | f1 (token F1) | "
        "format (1 if the episode ends with a non-empty answer) | process (mean value of the episode's calls, clipped to [-1, 1])",
    )
    informative: float = Field(1.0, description="process: value of a search that shows a supporting passage not seen before")
    uninformative: float = Field(0.0, description="process: value of any other valid search")
    repeated: float = Field(-0.5, description="process: value of a call repeated with the same arguments")
    invalid: float = Field(-1.0, description="process: value of an invalid call: unparsable turn, bad arguments, unknown tool")
    failed: float = Field(0.0, description="process: value of a failed call: tool error or injected fault")


class QATeacherParams(Section):
    """The scripted QA expert that follows the hops through the search tool."""

    samples: int = Field(1, ge=1, le=64, description="trajectories per question")
    seed: int = Field(0, description="seed of the episodes")
    mistake_rate: float = Field(0.1, ge=0.0, le=1.0, description="share of answers spoiled on purpose, so filtering has work to do")


class QAFilterParams(Section):
    """Which QA trajectories become SFT data: exact-match answers only."""

    max_tokens: int = Field(1024, ge=64, description="longest trajectory kept, counted with the policy's tokenizer, tools included")
    examples: int = Field(800, ge=1, description="trajectories in the SFT set (named so because DVC's run cache leaves any key called size out of its key)")
    levels: dict[str, float] = Field(
        default_factory=lambda: {"2hop": 1, "3hop": 1, "4hop": 1}, description="relative weights of the hop counts 2hop, 3hop, 4hop in the SFT set"
    )
    seed: int = Field(0, description="seed of the draw")


class QAGRPOParams(Section):
    """QA's own values for the grpo knobs whose best setting differs between the domains."""

    algorithm: Literal["grpo", "dapo", "arpo"] = Field("grpo", description="QA GRPO's algorithm, in place of grpo.algorithm")
    learning_rate: float = Field(1e-4, gt=0, description="QA GRPO's learning rate, in place of grpo.learning_rate (travel's 3e-4 took QA EM from 27% to 8%)")
    temperature: float = Field(1.0, gt=0, description="QA GRPO's rollout temperature, in place of grpo.temperature")
    optimizer: Literal["adamw", "sgd"] = Field("adamw", description="QA GRPO's optimizer, in place of grpo.optimizer")
    unseen_queries: bool = Field(False, description="in place of grpo.unseen_queries; false: QA trains on every training question, those in its SFT set too")
    skip_levels: list[Literal["2hop", "3hop", "4hop"]] = Field(
        default_factory=list, description="hop counts left out of QA's GRPO, in place of grpo.skip_levels (whose easy, medium, hard are travel's levels)"
    )


class QAParams(Section):
    """The multi-hop QA domain: a search agent over a passage corpus."""

    source: Literal["synthetic", "hotpotqa", "2wiki", "musique"] = Field(
        "synthetic", description="synthetic: a generated knowledge world | hotpotqa | 2wiki | musique (then path: the dataset file)"
    )
    path: str = Field("", description="the dataset file when source is a public one (users bring it; it is read, never copied)")
    world: QAWorldSpec = Field(default_factory=QAWorldSpec, description="the synthetic knowledge world: people, cities, countries, companies")
    questions: QuestionSpec = Field(
        default_factory=QuestionSpec, description="the questions: split sizes and seed for every source, hops and kinds for the synthetic one"
    )
    top_k: int = Field(3, ge=1, le=50, description="passages per search")
    max_words: int | None = Field(None, ge=1, description="words per passage in an observation; null: the whole passage")
    max_turns: int = Field(8, ge=1, le=100, description="turns per episode")
    teacher: QATeacherParams = Field(default_factory=QATeacherParams, description="the scripted expert that writes the SFT trajectories")
    filter: QAFilterParams = Field(default_factory=QAFilterParams, description="which trajectories become SFT data")
    reward: QARewardParams = Field(
        default_factory=QARewardParams, description="QA's GRPO reward: weighted named functions (em, f1, format, process)"
    )
    grpo: QAGRPOParams = Field(default_factory=QAGRPOParams, description="QA's own algorithm, learning rate, temperature and optimizer for GRPO")

    @model_validator(mode="after")
    def _path(self) -> QAParams:
        if self.source != "synthetic" and not self.path:
            raise ValueError(f"source {self.source} needs path: the dataset file")
        return self


SECTIONS = {"qa": QAParams}
LAYOUT = Layout(
    "qa_", Path("data/qa/corpus"), Path("data/qa/questions"), Path("data/qa/trajectories"), Path("data/qa/sft"), Path("models/qa"), Path("data/qa/infer"), Path("reports/qa")
)
BASELINES = {"naive_rag": "base", "base_tool_call": "base"}  # Agent-R1's baselines play the untrained base model
SFT_SET_LIMITS = ("qa.filter.max_tokens",)
TRAINED = ("qa_grpo", "qa_sft")
METRICS = ("em", "f1")
LEVELS = ("2hop", "3hop", "4hop")  # hop counts: the passages an answer needs
