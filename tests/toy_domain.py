"""A third domain in one module, for tests: look up a person's phone extension in a directory.

The generic stages run it as `python -m stages.distill tests.toy_domain` and so on; nothing
outside this file knows it exists. It brings a params section (`phone`, validated like any other)
and a baseline (`closed_book`: the base model without the directory).
"""

from __future__ import annotations

import json
import random
from functools import cached_property
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from star.domain import Domain, Rubric
from star.env.core import Tool, ToolEnv, ToolError
from star.env.episode import EpisodeRow
from star.env.teacher import answer_text, tool_call_text
from star.io import atomic_dir, read_jsonl, write_json
from star.sections import Section

SYSTEM = """You find phone extensions. Think in <think>...</think>, call one tool as <tool_call>{"name": "Lookup", "arguments": {"name": ...}}</tool_call>, and end with the extension in <answer>...</answer>.
Tools: Lookup{name}."""
SPLITS = {"train": 24, "validation": 0, "test": 6}


class Task(BaseModel):
    idx: int
    name: str
    extension: str
    level: str = "easy"


class PhoneFilter(Section):
    """Which trajectories become SFT data."""

    max_tokens: int = Field(512, ge=64, description="longest trajectory kept")
    examples: int = Field(16, ge=1, description="trajectories in the SFT set")
    levels: dict[str, float] = Field(default_factory=lambda: {"easy": 1.0}, description="relative weights of the levels")
    seed: int = Field(0, description="seed of the draw")


class PhoneParams(Section):
    """The phone domain's own knobs."""

    seed: int = Field(0, description="seed of the directory's extensions")
    filter: PhoneFilter = Field(default_factory=PhoneFilter, description="which trajectories become SFT data")


# What star/sections.py reads of a domain: its sections, its baselines, its filter's token limit.
SECTIONS = {"phone": PhoneParams}
BASELINES = {"closed_book": "base"}  # the untrained model, asked without the directory
SFT_SET_LIMITS = ("phone.filter.max_tokens",)


class PhoneEnv(ToolEnv):
    system_prompt = SYSTEM

    def __init__(self, book: dict[str, str], max_turns: int, closed_book: bool = False):
        def lookup(name: str) -> str:
            """Look up a person's phone extension.

            Args:
                name: the person's name
            """
            if name not in book:
                raise ToolError(f"no one is named {name}")
            return f"{name}: extension {book[name]}"

        super().__init__([] if closed_book else [Tool(lookup, "Lookup")], max_turns=max_turns)

    def prompt(self, task: Task) -> str:
        return f"What is the extension of {task.name}?"


class PhoneDomain(Domain):
    name = "phone"
    sections = ("phone",)

    @property
    def system_prompt(self) -> str:
        return SYSTEM

    @cached_property
    def book(self) -> dict[str, str]:
        return json.loads((self.world / "book.json").read_text())

    def build_world(self, out: Path) -> dict[str, float]:
        rng = random.Random(self.params["phone"].seed)
        names = sorted({a + b for a in ("Ka", "Lo", "Mi", "Nu", "Pe", "Ro") for b in ("da", "ven", "sa", "tor", "lin")})
        with atomic_dir(out) as tmp:
            write_json(tmp / "book.json", {name: str(rng.randint(100, 999)) for name in names})
        return {"people": len(names)}

    def synthesize(self, out: Path) -> dict[str, float]:
        names = sorted(self.book)
        random.Random(1).shuffle(names)
        with atomic_dir(out) as tmp:
            start = 0
            for split, n in SPLITS.items():
                tasks = [Task(idx=start + i, name=name, extension=self.book[name]) for i, name in enumerate(names[start : start + n])]
                (tmp / f"{split}.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
                start += n
        return {f"tasks_{split}": n for split, n in SPLITS.items()}

    def load_tasks(self, path: Path) -> list[Any]:
        return [Task.model_validate(row) for row in read_jsonl(path)]

    def prompt(self, task: Any) -> str:
        return f"What is the extension of {task.name}?"

    def make_env(self, task: Any, seed: int, *, max_turns: int, fault_rate: float = 0.0, policy: str = "") -> Any:
        return PhoneEnv(self.book, max_turns, closed_book=policy.endswith("closed_book"))

    def expert_settings(self) -> str:
        return "phone expert"

    def _row(self, env: PhoneEnv, task: Task, policy: str, sample: int) -> dict:
        success = env.answer is not None and env.answer.strip() == task.extension
        return EpisodeRow.of(env, task.idx, task.level, policy, sample, tools=json.dumps(env.tool_schemas()), success=success).row()

    def expert_episodes(self, items: list[tuple[Any, int]]) -> list[dict]:
        rows = []
        for task, sample in items:
            env = self.make_env(task, 0, max_turns=4)
            env.reset(task)
            env.step(tool_call_text(f"Look up {task.name}.", "Lookup", {"name": task.name}))
            env.step(answer_text(f"The directory gives {self.book[task.name]}.", self.book[task.name]))
            rows.append(self._row(env, task, "expert", sample))
        return rows

    def reference_episodes(self, tasks: list[Any]) -> list[dict]:
        return self.expert_episodes([(t, 0) for t in tasks])

    def trajectory_metrics(self, rows: list[dict]) -> tuple[dict, dict[str, float]]:
        metrics = {"episodes": len(rows), "success_rate": sum(r["success"] for r in rows) / max(len(rows), 1)}
        return metrics, metrics

    def filter_params(self) -> BaseModel:
        return self.params["phone"].filter

    def judge(self, row: dict) -> bool:
        return bool(row["success"])

    def base_texts(self, rows: list[dict], tool_schemas: bool) -> list[str]:
        from star.models.tiny import corpus_from_trajectories

        return corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]), SYSTEM)

    def entity_names(self, identifiers: bool = False) -> list[str]:
        return sorted(self.book)

    def rubric(self, grpo: Any) -> Rubric:
        def score(task: Task, env: PhoneEnv, step: int) -> dict[str, float]:
            right = float(env.answer is not None and env.answer.strip() == task.extension)
            return {"reward": right, "success": right}

        return score

    def policy_row(self, task: Any, env: Any, trajectory: Any, policy: str) -> dict:
        return self._row(env, task, policy, 0)

    def report(self, rows: list[dict]) -> dict:
        return {"accuracy": sum(r["success"] for r in rows) / max(len(rows), 1), "episodes": len(rows)}


DOMAIN = PhoneDomain
