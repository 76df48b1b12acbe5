"""The schema of params.yaml: one pydantic model per section.

A stage loads only its own sections. Any problem (bad YAML, unknown key,
wrong type, value out of range) is a `ParamsError` whose message is one line
naming the key path, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from star.models.spec import BUILTIN_TINY, TinySpec
from star.qa.rewards import QARewardParams
from star.qa.synthesize import QuestionSpec
from star.qa.world import QAWorldSpec
from star.train.copy_pretrain import CopySpec
from star.train.grpo import GRPOParams
from star.train.sft_params import SFTParams
from star.travel.paraphrase import ParaphraseSpec
from star.travel.synthesize import SynthesisSpec
from star.travel.synthetic import WorldSpec


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorldParams(Section):
    """Where the sandbox comes from."""

    source: Literal["synthetic", "travelplanner"] = "synthetic"
    # a directory in the official TravelPlanner CSV layout (source: travelplanner)
    database: str = "../shared/data/travelplanner/database"
    synthetic: WorldSpec = Field(default_factory=WorldSpec)


class EnvParams(Section):
    """How the agent's environment behaves."""

    row_cap: int = Field(5, ge=1, le=100)
    max_turns: int = Field(16, ge=1, le=200)
    # share of tool calls that fail during GRPO rollouts (the paper's tool-instability ablation)
    fault_rate: float = Field(0.0, ge=0.0, le=1.0)


class SynthesizeParams(SynthesisSpec):
    """Query synthesis: split sizes, difficulty and trip-length mix, budgets."""

    paraphrase: ParaphraseSpec = Field(default_factory=ParaphraseSpec)


class OpenAIEndpoint(Section):
    """Any OpenAI-compatible server; the key is read from `api_key_env`, never from params."""

    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = "policy"
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = Field(120.0, gt=0)
    retries: int = Field(3, ge=0, le=20)


class OpenAITeacherParams(OpenAIEndpoint):
    model: str = "deepseek-chat"
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(1024, ge=16)
    concurrency: int = Field(4, ge=1, le=256)


class TeacherParams(Section):
    """Who solves the training queries in the sandbox."""

    kind: Literal["expert", "openai"] = "expert"
    samples: int = Field(1, ge=1, le=64)
    seed: int = 0
    # expert: share of plans spoiled on purpose, so filtering has work to do
    mistake_rate: float = Field(0.1, ge=0.0, le=1.0)
    top_k: int = Field(1, ge=1, le=20)
    upgrade_prob: float = Field(0.0, ge=0.0, le=1.0)
    # tool faults while distilling: the teacher's recoveries become SFT data
    fault_rate: float = Field(0.0, ge=0.0, le=1.0)
    openai: OpenAITeacherParams = Field(default_factory=OpenAITeacherParams)


class FilterParams(Section):
    """Which trajectories become SFT data."""

    require: Literal["final", "commonsense", "delivered"] = "final"
    max_tokens: int = Field(1024, ge=64)
    size: int = Field(1000, ge=1)
    levels: dict[Literal["easy", "medium", "hard"], float] = Field(
        default_factory=lambda: {"easy": 4, "medium": 3, "hard": 3}
    )
    seed: int = 0


class ModelParams(Section):
    """The policy model: the built-in tiny one or any Hugging Face causal LM."""

    name_or_path: str = BUILTIN_TINY
    # render the tools' JSON schemas into the prompt (native tool calling); the
    # system prompt lists the tools either way
    tool_schemas: bool = False
    tiny: TinySpec = Field(default_factory=TinySpec)


class LLMFormatterParams(OpenAIEndpoint):
    model: str = "gpt-4o-mini"
    timeout: float = Field(60.0, gt=0)


class FormatParams(Section):
    """Itinerary text to the official plan JSON."""

    kind: Literal["rules", "llm"] = "rules"
    llm: LLMFormatterParams = Field(default_factory=LLMFormatterParams)


class OpenAIEndpointParams(OpenAIEndpoint):
    concurrency: int = Field(8, ge=1, le=256)


class InferParams(Section):
    """How policies are run on the test split."""

    backend: Literal["transformers", "openai", "vllm"] = "transformers"
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_turns: int = Field(12, ge=1, le=200)
    max_new_tokens: int = Field(256, ge=1)
    max_total_tokens: int = Field(2048, ge=64)
    # Consecutive unparseable turns that end an episode (0: no limit); an untrained model ends early.
    max_invalid_turns: int = Field(3, ge=0)
    batch_size: int = Field(32, ge=1)
    seed: int = 0
    openai: OpenAIEndpointParams = Field(default_factory=OpenAIEndpointParams)


class EvaluateParams(Section):
    mode: Literal["official", "strict"] = "official"


class QATeacherParams(Section):
    """The scripted QA expert that follows the hops through the search tool."""

    samples: int = Field(1, ge=1, le=64)
    seed: int = 0
    mistake_rate: float = Field(0.1, ge=0.0, le=1.0)


class QAFilterParams(Section):
    """Which QA trajectories become SFT data: exact-match answers only."""

    max_tokens: int = Field(1024, ge=64)
    size: int = Field(1000, ge=1)
    levels: dict[str, float] = Field(default_factory=lambda: {"2hop": 1, "3hop": 1, "4hop": 1})
    seed: int = 0


class QAParams(Section):
    """The multi-hop QA domain: a search agent over a passage corpus."""

    source: Literal["synthetic", "hotpotqa", "2wiki", "musique"] = "synthetic"
    # the dataset file when source is a public one (users bring it; it is read, never copied)
    path: str = ""
    world: QAWorldSpec = Field(default_factory=QAWorldSpec)
    questions: QuestionSpec = Field(default_factory=QuestionSpec)
    top_k: int = Field(3, ge=1, le=50)  # passages per search
    max_words: int | None = Field(None, ge=1)  # per passage in an observation; None = whole
    max_turns: int = Field(8, ge=1, le=100)
    teacher: QATeacherParams = Field(default_factory=QATeacherParams)
    filter: QAFilterParams = Field(default_factory=QAFilterParams)
    reward: QARewardParams = Field(default_factory=QARewardParams)

    @model_validator(mode="after")
    def _path(self) -> QAParams:
        if self.source != "synthetic" and not self.path:
            raise ValueError(f"source {self.source} needs path: the dataset file")
        return self


class CopyPretrainParams(CopySpec):
    """Copy pretraining of the built-in model before SFT, so it copies names and dates from its context."""


class SFTStageParams(SFTParams):
    """Supervised fine-tuning on the filtered trajectories (TRL SFTTrainer)."""


class GRPOStageParams(GRPOParams):
    """Multi-turn GRPO in the sandbox (TRL GRPOTrainer)."""


SECTIONS: dict[str, type[Section]] = {
    "copy_pretrain": CopyPretrainParams,
    "sft": SFTStageParams,
    "grpo": GRPOStageParams,
    "infer": InferParams,
    "format": FormatParams,
    "evaluate": EvaluateParams,
    "model": ModelParams,
    "world": WorldParams,
    "env": EnvParams,
    "synthesize": SynthesizeParams,
    "teacher": TeacherParams,
    "filter": FilterParams,
    "qa": QAParams,
}


class ParamsError(Exception):
    """A params.yaml problem, explained in one line."""


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def _one_line(section: str, model: type[BaseModel], exc: ValidationError, source: str) -> str:
    errors = exc.errors()
    err = errors[0]
    loc = tuple(err["loc"])
    path = ".".join([section, *map(str, loc)])
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(_allowed_keys(model, loc)) or "none"
        what = f"unknown key (allowed: {allowed})"
    else:
        what = err["msg"]
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{source}: {path} = {value!r}: {what}{more}"


def read_yaml(path: str | Path) -> dict[str, Any]:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}:{where} is not valid YAML ({getattr(exc, 'problem', exc)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_section(name: str, raw: Any, source: str = "params.yaml") -> Section:
    model = SECTIONS[name]
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: {name} = {raw!r}: must be a mapping")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ParamsError(_one_line(name, model, exc, source)) from None


def load_params(path: str | Path, sections: list[str]) -> dict[str, Section]:
    """Validate only the named sections; a missing section takes its defaults."""
    data = read_yaml(path)
    return {name: parse_section(name, data.get(name), str(path)) for name in sections}
