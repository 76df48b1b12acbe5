"""The registry of domains, as params and stages see them: no logic, so params load without importing a domain.

Each registered domain is a package `star.<name>` whose `specs` module declares, beside its
schema classes:

    SECTIONS        {params.yaml section: its pydantic model}, the sections the domain owns
    LAYOUT          where its stages read and write (the paths in dvc.yaml)
    BASELINES       {policy: the model stage it plays}: policies that are not model stages
    SFT_SET_LIMITS  the dotted keys of its filters' token limits, which may not exceed sft.max_length
    TRAINED         its trained policies, best first, which reports show by default
    METRICS         its headline metrics, in the order reports show them; the first is the one split by level
    LEVELS          the levels its evaluation splits that metric by (`<level>/<metric>`), in order

A domain outside the registry (a module path such as tests.toy_domain) declares the same
names in its own module, all optional; its layout defaults to data/NAME/..., models/NAME.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel, ConfigDict

DOMAINS = ("travel", "qa")  # the built-in domains: star.travel, star.qa


class Section(BaseModel):
    """A params.yaml section: an unknown key is an error, never ignored."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Layout:
    """Where a domain's stages read and write."""

    prefix: str  # of its stage and run names
    world: Path
    tasks: Path  # the splits: train.jsonl, validation.jsonl, test.jsonl
    trajectories: Path
    sft: Path
    models: Path
    infer: Path
    reports: Path

    @classmethod
    def named(cls, name: str) -> Layout:
        data = Path("data") / name
        return cls(f"{name}_", data / "world", data / "tasks", data / "trajectories", data / "sft", Path("models") / name, data / "infer", Path("reports") / name)


def specs(domain: str) -> ModuleType:
    """The module that declares a domain's sections and paths: star.<domain>.specs for a built-in one, else the module itself."""
    return importlib.import_module(f"star.{domain}.specs" if domain in DOMAINS else domain)


def domain_sections(domain: str) -> dict[str, type[BaseModel]]:
    return dict(getattr(specs(domain), "SECTIONS", {}))


def layout(domain: str) -> Layout:
    return getattr(specs(domain), "LAYOUT", None) or Layout.named(domain.rsplit(".", 1)[-1])


def baselines(domain: str) -> dict[str, str]:
    return dict(getattr(specs(domain), "BASELINES", {}))


def sft_set_limits(domain: str) -> tuple[str, ...]:
    return tuple(getattr(specs(domain), "SFT_SET_LIMITS", ()))


def trained(domain: str) -> tuple[str, ...]:
    return tuple(getattr(specs(domain), "TRAINED", ()))


def metrics(domain: str) -> tuple[str, ...]:
    return tuple(getattr(specs(domain), "METRICS", ()))


def levels(domain: str) -> tuple[str, ...]:
    return tuple(getattr(specs(domain), "LEVELS", ()))
