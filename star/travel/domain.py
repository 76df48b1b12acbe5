"""TravelPlanner as a pipeline domain: the sandbox, its queries, TravelEnv, the scripted expert
(or an OpenAI-compatible teacher), the evaluator's rewards and the travel trajectory rows."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

from star.domain import Domain, Rubric
from star.io import atomic_dir, write_json

# Where the teacher's server lives and how patiently it is called do not change
# what it answers: moving it to another address keeps distill's progress.
TRANSPORT = {"base_url", "api_key_env", "timeout", "retries", "concurrency"}


class TravelDomain(Domain):
    name = "travel"
    sections = ("world", "synthesize", "teacher", "env", "filter", "reward")

    @cached_property
    def sandbox(self) -> Any:
        from star.travel.world.sandbox import Sandbox

        return Sandbox.load(self.world)

    @cached_property
    def tools(self) -> Any:
        from star.travel.world.tools import TravelTools

        return TravelTools(self.sandbox, row_cap=self.params["env"].row_cap)

    @cached_property
    def index(self) -> Any:
        from star.travel.world.sandbox_index import index_for

        return index_for(self.sandbox)

    def loaded(self) -> TravelDomain:
        self.sandbox  # loads it, so a pickled copy carries it
        return self

    def __getstate__(self) -> dict:
        # A pickled copy carries the sandbox; its tools and index are rebuilt where it lands.
        return {k: v for k, v in self.__dict__.items() if k not in ("tools", "index")}

    def check_inputs(self, stage: str) -> None:
        """Synthesis from the published query file reads it first, so a missing or malformed one is one line."""
        if stage != "synthesize":
            return
        from star.travel.world.official import read_official_queries

        params = self.params["synthesize"]
        if params.source == "official":
            read_official_queries(params.path)

    def build_world(self, out: Path) -> dict[str, float]:
        from star.travel.world.sandbox import load_travelplanner
        from star.travel.world.synthetic import generate_world

        params = self.params["world"]
        sandbox = load_travelplanner(params.database) if params.source == "travelplanner" else generate_world(params.synthetic)
        sandbox.save(out)
        counts = {f"rows_{name}": frame.height for name, frame in sandbox.tables().items()}
        counts["states"] = len(sandbox.states())
        return counts

    def synthesize(self, out: Path) -> dict[str, float]:
        from star.travel.world.synthesize import SPLITS, compose_queries

        splits, stats = compose_queries(self.sandbox, self.params["synthesize"], self.params["env"])
        with atomic_dir(out) as tmp:
            for split in SPLITS:
                with open(tmp / f"{split}.jsonl", "w") as f:
                    for query in splits[split]:
                        f.write(query.model_dump_json() + "\n")
            write_json(tmp / "stats.json", stats)
        metrics = {f"queries_{s}": len(splits[s]) for s in SPLITS}
        for split in SPLITS:
            for query in splits[split]:
                metrics[f"{split}_{query.level}"] = metrics.get(f"{split}_{query.level}", 0) + 1
        return {**metrics, **stats}

    def load_tasks(self, path: Path) -> list[Any]:
        from star.travel.world.query import read_queries

        return read_queries(path)

    @property
    def system_prompt(self) -> str:
        from star.travel.env import SYSTEM_PROMPT

        return SYSTEM_PROMPT

    def prompt(self, task: Any) -> str:
        return task.query

    def make_env(self, task: Any, seed: int, *, max_turns: int, fault_rate: float = 0.0, policy: str = "") -> Any:
        from star.travel.env import TravelEnv

        return TravelEnv(self.tools, max_turns=max_turns, fault_rate=fault_rate, seed=seed + task.idx)

    def expert_settings(self) -> str:
        return self.params["teacher"].model_dump_json(exclude={"openai": TRANSPORT}) + self.params["env"].model_dump_json()

    def expert_samples(self) -> int:
        return self.params["teacher"].samples

    def expert_concurrency(self) -> tuple[int, int | None]:
        teacher = self.params["teacher"]
        # A server's teacher answers one episode a task, as many at once as its concurrency allows.
        return (teacher.openai.concurrency, 1) if teacher.kind == "openai" else (1, None)

    def _episodes(self, teacher_params: Any, items: list[tuple[Any, int]], fault_rate: float) -> list[dict]:
        from star.travel.planner.distill import make_teacher, run_episode

        teacher, env = make_teacher(teacher_params), self.params["env"]
        return [run_episode(teacher, self.tools, self.index, q, s, seed=teacher_params.seed, max_turns=env.max_turns, fault_rate=fault_rate) for q, s in items]

    def expert_episodes(self, items: list[tuple[Any, int]]) -> list[dict]:
        teacher = self.params["teacher"]
        return self._episodes(teacher, items, teacher.fault_rate)

    def reference_episodes(self, tasks: list[Any]) -> list[dict]:
        teacher = self.params["teacher"].model_copy(update={"mistake_rate": 0.0})
        return self._episodes(teacher, [(q, 0) for q in tasks], 0.0)

    def trajectory_metrics(self, rows: list[dict]) -> tuple[dict, dict[str, float]]:
        stats: Counter = Counter()
        for row in rows:
            level = row["level"]
            stats["trajectories"] += 1
            stats[f"trajectories_{level}"] += 1
            stats[f"success_{level}"] += row["success"]
            stats["success"] += row["success"]
            stats["turns"] += row["turns"]
            stats["tool_errors"] += row["tool_errors"]
        n = max(stats["trajectories"], 1)
        metrics = {"trajectories": stats["trajectories"], "success_rate": stats["success"] / n, "mean_turns": stats["turns"] / n}
        metrics["tool_errors_per_trajectory"] = stats["tool_errors"] / n
        for level in ("easy", "medium", "hard"):
            if stats[f"trajectories_{level}"]:
                metrics[f"success_rate_{level}"] = stats[f"success_{level}"] / stats[f"trajectories_{level}"]
        return dict(stats), metrics

    def filter_params(self) -> Any:
        return self.params["filter"]

    def judge(self, row: dict) -> bool:
        from star.train.filtering import passes

        return passes(row, self.params["filter"].require)

    def augment(self, kept: list[dict], count_tokens: Callable[[dict], int], stats: dict) -> list[dict]:
        """Each kept row followed by its renamed copies that fit the token limit (a tokenizer
        without one token per name may spell a renamed name longer)."""
        from star.travel.planner.rename import Vocabulary, renamed_copies

        params = self.params["filter"]
        if not params.rename_copies:
            return kept
        vocabulary, rows = Vocabulary(self.sandbox), []
        for index, row in enumerate(kept):
            rows.append(row)
            # seeded by the row's place in the sorted selection: the same params give the same bytes
            rng = random.Random(f"rename {params.seed} {index}")
            for copy in renamed_copies(row, vocabulary, params.rename_copies, rng, params.rename_within_world):
                tokens = count_tokens(copy)
                if tokens > params.max_tokens:
                    stats["dropped_renamed_too_long"] = stats.get("dropped_renamed_too_long", 0) + 1
                else:
                    rows.append({**copy, "tokens": tokens})
        stats["renamed_copies"] = len(rows) - len(kept)
        return rows

    def base_texts(self, rows: list[dict], tool_schemas: bool) -> list[str]:
        from star.models.tiny import corpus_from_trajectories

        tools = json.loads(rows[0]["tools"]) if rows and tool_schemas else []
        return corpus_from_trajectories([r["messages"] for r in rows], tools, self.system_prompt)

    def entity_names(self, identifiers: bool = False) -> list[str]:
        from star.travel.world.synthetic import entity_names
        from star.travel.world.synthetic import identifiers as ids

        return entity_names(self.sandbox) + (ids(self.sandbox) if identifiers else [])

    def rubric(self, grpo: Any) -> Rubric:
        from star.travel.rewards import Scorer

        return Scorer(self.index, self.params["reward"], grpo.steps)

    def policy_row(self, task: Any, env: Any, trajectory: Any, policy: str) -> dict:
        from star.travel.play import trajectory_row

        return trajectory_row(task, env, trajectory, policy)


DOMAIN = TravelDomain

