"""The scripted QA teacher, and trajectory rows in the travel distillation format.

The expert searches the question's `plan` (the entity names along the hops,
or the supporting titles of a loaded question) one call per hop, retries a
search that fails, and answers once every planned passage has been shown to
it; if one never was, it answers "unknown" rather than guess. Its thoughts
quote where each name comes from (the sentence of the last passage that
names it, or the question's words before it) and the sentences that decide
the answer, so every name it writes repeats text just before it: a small
model learns to copy such exact repeats long before it learns lookups. With
`mistake_rate` it spoils that share of answers on purpose, so filtering has
work to do.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from star.env.core import arguments_json, tool_errors
from star.env.teacher import Teacher, answer_text, hash_seed, tool_call_text
from star.qa.data import Question
from star.qa.env import QAEnv
from star.qa.evaluate import score_answer
from star.qa.metrics import normalize_answer
from star.qa.search import QATools

MAX_RETRIES = 3  # per search, when the tool fails transiently


def _failed(observation: str) -> bool:
    return observation.startswith("Error:") or observation.startswith("No results (")


class QAExpert:
    name = "expert"

    def __init__(self, mistake_rate: float = 0.0):
        if not 0.0 <= mistake_rate <= 1.0:
            raise ValueError(f"mistake_rate must be in [0, 1], got {mistake_rate}")
        self.mistake_rate = mistake_rate

    def episode(self, env: QAEnv, question: Question, rng: random.Random) -> None:
        mistake = rng.random() < self.mistake_rate  # drawn first, so it depends on the seed only
        plan = question.plan or [question.question]
        read: dict[str, str] = {}  # title -> text of every passage shown so far
        complete = True
        current = question.question  # the question with each resolved phrase replaced by its entity
        for i, query in enumerate(plan):
            thought, current = _lead(current, read.get(plan[i - 1], "") if i else "", plan[i - 1] if i else "", query)
            found = False
            for attempt in range(MAX_RETRIES + 1):
                if attempt:
                    thought = f"The search failed. Try {query} again."
                observation = env.step(tool_call_text(thought, "Search", {"query": query})).observation
                if env.done:  # out of turns
                    return
                lines = observation.splitlines() if not _failed(observation) else []
                for line in lines:
                    title, _, text = line.partition(": ")
                    read.setdefault(title, text)
                found = any(line.startswith(f"{query}: ") for line in lines)
                if not _failed(observation):
                    break
            complete = complete and (found or not question.plan)
        answer = question.answer if complete else "unknown"
        evidence = _evidence(question, read) if complete and question.plan else ""
        if mistake:
            answer = _spoil(answer, list(read), rng)
        restated = f"{current} " if current != question.question else ""
        env.step(answer_text(f"{restated}{evidence}So the answer is {answer}.", answer))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def _naming(text: str, name: str) -> str | None:
    """The first sentence of `text` that names `name`, if any."""
    return next((s for s in _sentences(text) if name in s), None)


def _lead(question: str, previous: str, searched: str, query: str) -> tuple[str, str]:
    """The thought before a search (where its query comes from), and the question left to answer.

    A hop that resolves "the <relation> of <searched>" restates the question
    with that phrase replaced by the name found, so the next hop's relation
    always sits right before the name just written.
    """
    if not previous:
        return f"Now: {question} Look up {query}.", question
    if sentence := _naming(previous, query):
        resolved = re.sub(rf"\bthe (?:[a-z]+ )?[a-z]+ of {re.escape(searched)}\b", lambda _: query, question, count=1)
        if resolved != question:
            return f"{sentence} Now: {resolved} Look up {query}.", resolved
        return f"{sentence} Next, look up {query}.", question
    at = question.find(query)
    if at >= 0:  # the other side of a comparison: quote the question's phrase up to the name
        phrase = re.split(r",\s|\sor\s", question[:at])[-1] + query
        return f"The other one is {phrase}. Look up {query}.", question
    return f"Next, look up {query}.", question


def _evidence(question: Question, read: dict[str, str]) -> str:
    """The sentences that decide the answer, quoted before it (empty if none are found)."""
    plan = question.plan
    if question.kind == "comparison":
        # the ends of the two chains: plan entries whose passage does not name the next entry
        ends = [n for i, n in enumerate(plan) if i == len(plan) - 1 or plan[i + 1] not in read.get(n, "")]
        quoted = [next((s for s in _sentences(read.get(n, "")) if re.search(r"\d", s)), None) for n in ends]
        if len(ends) == 2 and all(quoted):
            return "".join(f"{s} " for s in quoted) + _compare(ends, quoted, question.question)
    else:
        quoted = [_naming(read.get(plan[-1], ""), question.answer)]
    return "".join(f"{s} " for s in quoted if s)


def _compare(names: list[str], sentences: list[str], question: str) -> str:
    """Two years compared digit by digit, so each step is one small comparison.

    The verdict lists "earlier X, later Y", and the word the question asks
    for is restated before the answer, so the answer is the name that follows it.
    """
    years = [re.search(r"\b\d+\b", s).group() for s in sentences]
    a, b = years
    if len(a) != len(b) or a == b:
        return ""
    steps = []
    for x, y in zip(a, b):
        steps.append(f"{x} {'=' if x == y else '<' if x < y else '>'} {y}")
        if x != y:
            break
    first, second = names if a < b else names[::-1]
    asked = re.search(r"\b(earlier|later)\b", question)
    verdict = f"The question asks {asked[1]}: {first if asked[1] == 'earlier' else second}. " if asked else ""
    return f"{names[0]} {a} or {names[1]} {b}? {', '.join(steps)}: earlier {first}, later {second}. {verdict}"


def _spoil(answer: str, titles: list[str], rng: random.Random) -> str:
    """A plausible wrong answer: another year, or another name the expert has read."""
    if answer.isdigit():
        return str(int(answer) + rng.choice([-1, 1]) * rng.randint(1, 30))
    others = sorted({t for t in titles if normalize_answer(t) != normalize_answer(answer)})
    return rng.choice(others) if others else "unknown"


def trajectory_row(env: QAEnv, question: Question, teacher: str, sample: int) -> dict[str, Any]:
    evaluation = score_answer(question, env.answer)
    return {
        "query_id": question.idx,
        "level": question.level,
        "hops": question.hops,
        "kind": question.kind,
        "source": question.source,
        "sample": sample,
        "teacher": teacher,
        "messages": env.history,
        "tools": json.dumps(env.tool_schemas()),
        "turns": env.turns,
        "tool_calls": sum(c.name != "" for c in env.calls),
        "tool_errors": tool_errors(env.calls),
        "truncated": env.truncated,
        "answer": env.answer,
        "evaluation": evaluation,
        "success": evaluation["em"] == 1.0,
        "calls": [arguments_json({"name": c.name, "arguments": c.arguments, "kind": c.kind}) for c in env.calls],
    }


def run_episode(
    teacher: Teacher, tools: QATools, question: Question, sample: int, *, seed: int, max_turns: int = 8, fault_rate: float = 0.0
) -> dict[str, Any]:
    # Every episode has its own seeds, so results do not depend on run order or concurrency.
    env = QAEnv(tools, max_turns=max_turns, fault_rate=fault_rate, seed=hash_seed(seed, "faults", question.idx, sample))
    env.reset(question)
    teacher.episode(env, question, random.Random(hash_seed(seed, "teacher", question.idx, sample)))
    return trajectory_row(env, question, teacher.name, sample)
