"""Multi-hop QA as a pipeline domain: a passage corpus with its BM25 index, questions, QAEnv
(and the naive-RAG baseline's env), the scripted expert, EM/F1 and the QA reward."""

from __future__ import annotations

import json
import logging
import time
from functools import cached_property
from pathlib import Path
from typing import Any

from star.domain import Domain, Rubric
from star.io import atomic_dir

SPLITS = ("train", "validation", "test")
log = logging.getLogger(__name__)


def _skipped(dataset: Any) -> dict[str, float]:
    return {f"skipped_{why}": n for why, n in dataset.skipped.items()}


class QADomain(Domain):
    name = "qa"
    sections = ("qa",)
    checked: Any = None  # the public file, once check_inputs has read it

    @property
    def qa(self) -> Any:
        return self.params["qa"]

    @cached_property
    def tools(self) -> Any:
        from star.qa.search import QATools, SearchIndex

        return QATools(SearchIndex.load(self.world / "index"), top_k=self.qa.top_k, max_words=self.qa.max_words)

    def loaded(self) -> QADomain:
        self.tools  # loads the index, so a pickled copy carries it
        return self

    def build_world(self, out: Path) -> dict[str, float]:
        from star.qa.data import save_passages
        from star.qa.loaders import load_dataset
        from star.qa.search import SearchIndex, retrieval_hits
        from star.qa.world import build_world

        dataset = None
        with atomic_dir(out) as tmp:
            if self.qa.source == "synthetic":
                world = build_world(self.qa.world)
                world.save(tmp)
                passages = world.passages()
            else:
                self._warn_ignored("world")
                dataset = self.checked or load_dataset(self.qa.source, self.qa.path)
                passages = dataset.passages
            save_passages(tmp / "passages.jsonl", passages)
            start = time.perf_counter()
            index = SearchIndex.build(passages)
            index.save(tmp / "index")
            seconds = time.perf_counter() - start
        metrics = {"passages": len(passages), "index_build_seconds": seconds}
        if dataset is not None:  # how well BM25 finds the gold passages, the figures the expert's searches depend on
            metrics.update({"questions": len(dataset.questions), **_skipped(dataset)})
            metrics.update(retrieval_hits(index, dataset.questions, self.qa.top_k))
        return metrics

    def check_inputs(self, stage: str = "world") -> None:
        """Read a public file before a stage's work begins, so a bad one (or one too small for the
        splits asked for) stops it with one line (a DatasetError)."""
        from star.qa.loaders import load_dataset, split_counts

        if self.qa.source != "synthetic":
            self.checked = load_dataset(self.qa.source, self.qa.path)
            split_counts(len(self.checked.questions), self.qa.questions.sizes, str(self.qa.path), warn=False)

    def _warn_ignored(self, *keys: str) -> None:
        """Knobs of the synthetic source that a public file does not use: a warning when they are not their defaults."""
        from star.qa.specs import QAWorldSpec, QuestionSpec

        defaults = {"world": QAWorldSpec(), "hops": QuestionSpec().hops, "kinds": QuestionSpec().kinds}
        for key in keys:
            value = self.qa.world if key == "world" else getattr(self.qa.questions, key)
            if value != defaults[key]:
                name = "qa.world" if key == "world" else f"qa.questions.{key}"
                log.warning("%s applies to the synthetic source only; %s takes %s as it is, so it is ignored", name, self.qa.source, self.qa.path)

    def synthesize(self, out: Path) -> dict[str, float]:
        from star.qa.data import save_questions
        from star.qa.loaders import load_dataset, split_questions
        from star.qa.synthesize import synthesize_questions
        from star.qa.world import KnowledgeWorld

        metrics: dict[str, float] = {}
        if self.qa.source == "synthetic":
            splits = synthesize_questions(KnowledgeWorld.load(self.world), self.qa.questions)
        else:
            self._warn_ignored("hops", "kinds")
            dataset = self.checked or load_dataset(self.qa.source, self.qa.path)
            splits = split_questions(dataset.questions, self.qa.questions.sizes, self.qa.questions.seed, str(self.qa.path))
            metrics = {"questions_available": len(dataset.questions), **_skipped(dataset)}
        with atomic_dir(out) as tmp:
            for split in SPLITS:
                save_questions(tmp / f"{split}.jsonl", splits.get(split, []))
        metrics.update({f"questions_{s}": len(splits.get(s, [])) for s in SPLITS})
        for question in splits.get("train", []):
            metrics[f"train_{question.level}"] = metrics.get(f"train_{question.level}", 0) + 1
        return metrics

    def load_tasks(self, path: Path) -> list[Any]:
        from star.qa.data import load_questions

        return load_questions(path)

    @property
    def system_prompt(self) -> str:
        from star.qa.env import QA_SYSTEM_PROMPT

        return QA_SYSTEM_PROMPT

    def prompt(self, task: Any) -> str:
        return task.question

    def episode_turns(self, requested: int) -> int:
        return self.qa.max_turns  # the env's own limit; a stage's limits may cut shorter

    def make_env(self, task: Any, seed: int, *, max_turns: int, fault_rate: float = 0.0, policy: str = "") -> Any:
        from star.qa.env import BaseToolCallEnv, NaiveRAGEnv, QAEnv

        # The baselines, also played by another domain's model (travel_sft_naive_rag: the alignment tax on their prompts).
        if policy.endswith("naive_rag"):  # one retrieval, then an answer
            return NaiveRAGEnv(self.tools)
        if policy.endswith("base_tool_call"):
            return BaseToolCallEnv(self.tools, max_turns=max_turns, fault_rate=fault_rate, seed=seed + task.idx)
        return QAEnv(self.tools, max_turns=max_turns, fault_rate=fault_rate, seed=seed + task.idx)

    def tool_schemas(self, policy: str, requested: bool) -> bool:
        # base_tool_call: the model's native function calling, its tools' JSON schemas in the prompt.
        return requested or policy.endswith("base_tool_call")

    def expert_settings(self) -> str:
        return self.qa.teacher.model_dump_json() + json.dumps([self.qa.top_k, self.qa.max_words, self.qa.max_turns])

    def expert_samples(self) -> int:
        return self.qa.teacher.samples

    def _episodes(self, mistake_rate: float, items: list[tuple[Any, int]]) -> list[dict]:
        from star.qa.expert import QAExpert, run_episode

        teacher = QAExpert(mistake_rate)
        return [run_episode(teacher, self.tools, q, s, seed=self.qa.teacher.seed, max_turns=self.qa.max_turns) for q, s in items]

    def expert_episodes(self, items: list[tuple[Any, int]]) -> list[dict]:
        return self._episodes(self.qa.teacher.mistake_rate, items)

    def reference_episodes(self, tasks: list[Any]) -> list[dict]:
        return self._episodes(0.0, [(q, 0) for q in tasks])

    def trajectory_metrics(self, rows: list[dict]) -> tuple[dict, dict[str, float]]:
        n = max(len(rows), 1)
        metrics = {
            "episodes": len(rows),
            "em": sum(r["evaluation"]["em"] for r in rows) / n,
            "f1": sum(r["evaluation"]["f1"] for r in rows) / n,
            "mean_turns": sum(r["turns"] for r in rows) / n,
            "success_rate": sum(r["success"] for r in rows) / n,
        }
        if any(r["source"] != "synthetic" for r in rows):  # a public file: how often the expert found no evidence to answer from
            metrics["unknown_rate"] = sum(r["answer"] == "unknown" for r in rows) / n
        return metrics, metrics

    def filter_params(self) -> Any:
        return self.qa.filter

    def judge(self, row: dict) -> bool:
        return bool(row["success"])  # exact match

    def base_texts(self, rows: list[dict], tool_schemas: bool) -> list[str]:
        from star.models.tiny import corpus_from_trajectories
        from star.qa.evaluate import NAIVE_RAG_SYSTEM_PROMPT

        tools = json.loads(rows[0]["tools"]) if rows else []
        # The baselines' prompts too: the schema (base_tool_call) and the RAG instruction.
        return corpus_from_trajectories([r["messages"] for r in rows], tools, self.system_prompt) + [NAIVE_RAG_SYSTEM_PROMPT]

    def entity_names(self, identifiers: bool = False) -> list[str]:
        from star.qa.world import KnowledgeWorld, entity_names

        # Loaded datasets have multi-word titles: only the synthetic world's names become tokens.
        return entity_names(KnowledgeWorld.load(self.world)) if (self.world / "world.json").exists() else []

    def grpo_params(self, grpo: Any) -> Any:
        return grpo.model_copy(update=self.qa.grpo.model_dump())

    def rubric(self, grpo: Any) -> Rubric:
        from star.qa.rewards import Scorer

        return Scorer(self.qa.reward)

    def policy_row(self, task: Any, env: Any, trajectory: Any, policy: str) -> dict:
        from star.qa.expert import trajectory_row

        # cut as the rollout engine decided (its token limits and invalid turns, besides the env's turns)
        return trajectory_row(env, task, policy, 0, truncated=trajectory.truncated, completion_tokens=sum(trajectory.completion_mask))

    def report(self, rows: list[dict]) -> dict:
        from star.qa.evaluate import aggregate

        return aggregate(rows)


DOMAIN = QADomain
