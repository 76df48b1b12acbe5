"""QA's GRPO rewards: named functions of one graded episode, weighed by `qa.reward`.

    em        exact match of the answer against the gold answer and its aliases,
              0 when the format fails
    f1        token F1 of the same
    format    1 if the episode ended with a non-empty <answer>, else 0
    process   mean over the episode's calls of a value per call, clipped to [-1, 1]
              (star/train/process.py), with searches told apart:
                informative search   a Search whose results show a supporting
                                     passage no earlier call showed (a question
                                     without supporting passages: any passage
                                     not shown before)
                other valid search   uninformative
                repeated, invalid and failed calls as for every domain

The reward that trains is the sum of weight x function (star/train/rubric.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from star.qa.data import Question
from star.qa.env import QAEnv
from star.qa.evaluate import score_answer
from star.qa.specs import QARewardParams
from star.train.process import call_breakdown, process_reward, verdicts
from star.train.rubric import RewardFunction, Rubric


def call_verdicts(question: Question, env: QAEnv) -> list[str]:
    """One of informative, uninformative, repeated, invalid, failed per call of the episode."""
    tools = env.qa_tools
    wanted = {tools.render(tools.index.by_id[pid]) for pid in question.supporting if pid in tools.index.by_id}
    shown: set[str] = set()
    found = []
    for call, verdict in zip(env.calls, verdicts([c.kind for c in env.calls])):
        if verdict == "informative":
            lines = set(call.content.splitlines()) if call.kind == "ok" else set()
            new = lines - shown
            useful = new & wanted if wanted else new
            verdict = "informative" if useful else "uninformative"
            shown |= lines
        found.append(verdict)
    return found


@dataclass
class GradedAnswer:
    """One finished episode as the reward functions see it."""

    question: Question
    env: QAEnv
    em: float
    f1: float
    formatted: bool


def reward_functions(params: QARewardParams) -> dict[str, RewardFunction]:
    """Every reward `qa.reward` can weigh, by name."""
    return {
        "em": lambda g: g.em,
        "f1": lambda g: g.f1,
        "format": lambda g: float(g.formatted),
        "process": lambda g: process_reward(call_verdicts(g.question, g.env), params),
    }


class Scorer:
    """The weighted reward of one finished episode, each weighted function's score, and the answer's scores."""

    def __init__(self, params: QARewardParams):
        self.rubric = Rubric(reward_functions(params), params.weights)

    def __call__(self, question: Question, env: QAEnv, step: int) -> dict[str, float]:
        formatted = env.answer is not None and bool(env.answer.strip())
        scores = score_answer(question, env.answer) if formatted else {"em": 0.0, "f1": 0.0}  # aliases count, as in evaluation
        return {
            "em": scores["em"],
            "f1": scores["f1"],
            "format": float(formatted),
            "success": scores["em"],
            "turns": float(env.turns),
            **call_breakdown([c.kind for c in env.calls]),
            **self.rubric.score(GradedAnswer(question, env, scores["em"], scores["f1"], formatted)),
        }
