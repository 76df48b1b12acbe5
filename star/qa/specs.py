"""The schema of the QA world, question and reward sections: no logic, so params load without importing the domain."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
