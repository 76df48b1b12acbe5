"""A domain: one family of tool-using tasks, everything the pipeline's generic flows need to know of it.

The flows (world, synthesize, distill, base, filter, GRPO, infer) are the same for
every domain; a domain brings its world, its tasks and their prompt, its ToolEnv,
its expert, its rubric (the reward's named terms), the row an episode becomes,
the filter's judge and its metrics. Each lives in its own module as a `Domain`
subclass named `DOMAIN`: `load_domain("qa")` imports star.qa.domain, and a dotted
module path ("tests.toy_domain") imports that module, so a new domain needs only
its own module.

A domain object is built from the params sections it names and the directory of
its world; it loads what it needs on first use and pickles, so chunks of its
episodes can run on a Ray or Dask worker.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

# (task, env, step) -> named reward terms, each logged: "reward" is what trains. Whether an episode
# was cut (and so kept out of the loss) is the rollout engine's call, not the rubric's.
Rubric = Callable[[Any, Any, int], dict[str, float]]


class Domain(ABC):
    name: ClassVar[str]
    sections: ClassVar[tuple[str, ...]]  # the params.yaml sections it reads, besides each stage's own

    def __init__(self, params: Mapping[str, BaseModel], world: Path):
        self.params = dict(params)
        self.world = world

    def loaded(self) -> Domain:
        """This domain with its world loaded, so that a pickled copy carries it to a cluster's workers."""
        return self

    def check_inputs(self, stage: str) -> None:
        """Read the files the world and tasks come from, raising ValueError (one line) on a bad one: the `stage`
        about to run (world, synthesize) calls it before its flow, so a bad file is reported as bad params are.
        Nothing by default."""

    # -- its world and tasks -------------------------------------------------

    @abstractmethod
    def build_world(self, out: Path) -> dict[str, float]:
        """Write the world (the tools' data) to `out`; its metrics."""

    @abstractmethod
    def synthesize(self, out: Path) -> dict[str, float]:
        """Write the task splits (train, validation, test .jsonl) of the world to `out`; their metrics."""

    @abstractmethod
    def load_tasks(self, path: Path) -> list[Any]:
        """The tasks of a split file; each has an `idx`."""

    @property
    @abstractmethod
    def system_prompt(self) -> str:
        """The policy's system message: its role, its tools and how to call them."""

    @abstractmethod
    def prompt(self, task: Any) -> str:
        """The task's first user message."""

    def episode_turns(self, requested: int) -> int:
        """Turns the env allows an episode when a stage asks for `requested`."""
        return requested

    @abstractmethod
    def make_env(self, task: Any, seed: int, *, max_turns: int, fault_rate: float = 0.0, policy: str = "") -> Any:
        """A fresh ToolEnv for `task`; `policy` may pick another env for a baseline."""

    def tool_schemas(self, policy: str, requested: bool) -> bool:
        """Whether `policy` sees its tools' JSON schemas in the prompt (`requested`: model.tool_schemas)."""
        return requested

    # -- the expert -----------------------------------------------------------

    @abstractmethod
    def expert_settings(self) -> str:
        """What, besides the world and the tasks, determines the expert's trajectories."""

    def expert_samples(self) -> int:
        """Trajectories per training task."""
        return 1

    def expert_concurrency(self) -> tuple[int, int | None]:
        """(threads, episodes per task) for distill's fan-out; None: the default chunk."""
        return 1, None

    @abstractmethod
    def expert_episodes(self, items: list[tuple[Any, int]]) -> list[dict]:
        """The expert's trajectory rows for (task, sample) pairs; each episode seeds itself."""

    @abstractmethod
    def reference_episodes(self, tasks: list[Any]) -> list[dict]:
        """The expert at its best on `tasks` (no deliberate mistakes): the reference policy's rows."""

    @abstractmethod
    def trajectory_metrics(self, rows: list[dict]) -> tuple[dict, dict[str, float]]:
        """(stats saved beside the trajectories, metrics logged) of distill's rows."""

    # -- SFT data ---------------------------------------------------------------

    @abstractmethod
    def filter_params(self) -> BaseModel:
        """The filter's knobs: require, max_tokens, size, levels, seed (star.train.filtering.select)."""

    def judge(self, row: dict) -> bool | None:
        """Whether a trajectory row is good enough for SFT; None: the evaluator's check of `require`."""
        return None

    def augment(self, kept: list[dict], count_tokens: Callable[[dict], int], stats: dict) -> list[dict]:
        """The SFT set drawn from `kept` (e.g. with renamed copies); counts go into `stats`."""
        return kept

    @abstractmethod
    def base_texts(self, rows: list[dict], tool_schemas: bool) -> list[str]:
        """The texts the built-in tiny model's tokenizer is trained on, from distill's rows."""

    def entity_names(self, identifiers: bool = False) -> list[str]:
        """Names the tiny tokenizer keeps whole, one token each; with `identifiers`, the domain's ids too."""
        return []

    # -- RL and evaluation --------------------------------------------------------

    def grpo_params(self, grpo: Any) -> Any:
        """The GRPO knobs as this domain trains them (its own overrides applied)."""
        return grpo

    @abstractmethod
    def rubric(self, grpo: Any) -> Rubric:
        """The episode's reward terms under `grpo`'s settings."""

    @abstractmethod
    def policy_row(self, task: Any, env: Any, trajectory: Any, policy: str) -> dict:
        """A policy's finished episode as a trajectory row."""

    def report(self, rows: list[dict]) -> dict | None:
        """The policy's summary where scoring is cheap enough to run with inference; None: a later stage scores."""
        return None


def load_domain(name: str) -> type[Domain]:
    """The Domain class of `name`: a built-in domain (travel, qa) or a module path holding `DOMAIN`."""
    try:
        module = importlib.import_module(name if "." in name else f"star.{name}.domain")
    except ModuleNotFoundError as exc:
        raise ValueError(f"unknown domain {name!r}: not a built-in one (travel, qa) nor an importable module ({exc})") from None
    domain = getattr(module, "DOMAIN", None)
    if not (isinstance(domain, type) and issubclass(domain, Domain)):
        raise ValueError(f"{module.__name__} has no DOMAIN (a star.domain.Domain subclass)")
    return domain
