"""The seed corpus: real expert outputs of both domains, which the fuzzer garbles and the other sections run on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from star.qa.expert import QAExpert
from star.qa.expert import run_episode as qa_run_episode
from star.qa.search import QATools, SearchIndex
from star.qa.specs import QAWorldSpec, QuestionSpec
from star.qa.synthesize import synthesize_questions
from star.qa.world import build_world
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.specs import SynthesisSpec, WorldSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import generate_world
from star.travel.world.tools import TravelTools


@dataclass
class Corpus:
    """Real expert outputs of both domains, the material the fuzzer garbles."""

    tools: TravelTools
    index: Any
    queries: list
    travel_calls: list[str]  # assistant turns with a <tool_call>
    travel_answers: list[tuple[Any, str]]  # (query, final assistant turn)
    submissions: list[tuple[Any, dict]]  # (query, the plan as a submission row)
    qa_tools: QATools
    questions: list
    qa_calls: list[str]
    qa_answers: list[tuple[Any, str]]


def build_corpus(n_queries: int = 40, n_questions: int = 40, seed: int = 0) -> Corpus:
    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(seed=seed, sizes={"train": n_queries, "validation": 0, "test": 0}, days={3: 1.0, 5: 1.0, 7: 1.0})).run()["train"]
    tools, index = TravelTools(world), index_for(world)
    teacher = ExpertTeacher(Expert(mistake_rate=0.2))
    calls, answers, submissions = [], [], []
    for q in queries:
        row = run_episode(teacher, tools, index, q, 0, seed=seed, max_turns=30, fault_rate=0.1)
        turns = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        calls += [t for t in turns if "<tool_call>" in t]
        answers += [(q, t) for t in turns if "<answer>" in t]
        if row["plan"] is not None:
            submissions.append((q, row["plan"]))

    qa_world = build_world(QAWorldSpec(seed=0))
    qa_tools = QATools(SearchIndex.build(qa_world.passages()), top_k=3)
    questions = synthesize_questions(qa_world, QuestionSpec(seed=1, sizes={"train": n_questions, "validation": 0, "test": 0}))["train"]
    qa_calls, qa_answers = [], []
    for question in questions:
        row = qa_run_episode(QAExpert(mistake_rate=0.2), qa_tools, question, 0, seed=seed, max_turns=12, fault_rate=0.1)
        turns = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        qa_calls += [t for t in turns if "<tool_call>" in t]
        qa_answers += [(question, t) for t in turns if "<answer>" in t]
    return Corpus(tools, index, queries, calls, answers, submissions, qa_tools, questions, qa_calls, qa_answers)
