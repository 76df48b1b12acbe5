"""The scripted QA teacher, and trajectory rows in the travel distillation format.

On the synthetic world the expert searches the question's `plan` (the entity
names along the hops) one call per hop, retries a search that fails, and
answers once every planned passage has been shown to it; if one never was,
it answers "unknown" rather than guess. Its thoughts quote where each name
comes from (the sentence of the last passage that names it, or the question's
words before it) and the sentences that decide the answer, so every name it
writes repeats text just before it: a small model learns to copy such exact
repeats long before it learns lookups. With `mistake_rate` it spoils that
share of answers on purpose, so filtering has work to do.

On a public dataset (`_public_episode`) titles are not unique and other pages
outrank the one searched for, so the expert works passage by passage: for
each gold passage (in hop order) it searches its title, then the title with
the question's words, then the question as written (search.QUERIES), until
that very passage (not one with the same title) is shown, within the turns
left. It answers only when every gold passage was shown and the answer (or
an alias) is written in one of them (yes/no answers aside); otherwise
"unknown", which filtering drops.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from star.env.episode import EpisodeRow
from star.env.teacher import Teacher, answer_text, hash_seed, tool_call_text
from star.qa.data import Question
from star.qa.env import QAEnv
from star.qa.evaluate import score_answer
from star.qa.metrics import normalize_answer
from star.qa.search import QUERIES, QATools

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
        if question.source != "synthetic":
            return _public_episode(env, question, mistake, rng)
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
    found = [re.search(r"\b\d+\b", s) for s in sentences]
    if not all(found):  # a digit but no number ("the late 19th century"): nothing to compare
        return ""
    a, b = (m.group() for m in found)
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


def _public_episode(env: QAEnv, question: Question, mistake: bool, rng: random.Random) -> None:
    """A question of a public dataset: search until each gold passage itself is shown, answer only from what was."""
    tools = env.qa_tools
    gold = [tools.index.by_id[pid] for pid in question.supporting if pid in tools.index.by_id]
    shown: list[str] = []  # observation lines, each once, in the order seen
    asked: set[str] = set()
    complete = True
    for n, passage in enumerate(gold):
        line = tools.render(passage)
        if line in shown:  # an earlier search showed it already
            continue
        found = False
        for name, make in QUERIES.items():
            query = make(passage.title, question.question)
            if query in asked:
                continue
            asked.add(query)
            thought = _why(name, passage.title, question.question, shown, first=not n and not shown)
            for attempt in range(MAX_RETRIES + 1):
                if env.turns >= env.max_turns - 1:  # keep the last turn for the answer
                    break
                observation = env.step(tool_call_text(thought if not attempt else f"The search failed. Try {query} again.", "Search", {"query": query})).observation
                if not _failed(observation):
                    shown.extend(x for x in observation.splitlines() if x not in shown)
                    break
            found = line in shown
            if found or env.turns >= env.max_turns - 1:
                break
        complete = complete and found
        if not complete:  # one gold passage out of reach: the rest cannot make the answer evidence-based
            break
    if not gold and env.turns < env.max_turns - 1:  # no gold passage in the corpus: the question as written, once
        observation = env.step(tool_call_text(f"Now: {question.question} Search the question.", "Search", {"query": question.question})).observation
        shown = observation.splitlines() if not _failed(observation) else []
    evidence = [tools.render(p) for p in gold] if gold else shown
    answer, sentence = _from_evidence(question, evidence) if complete else ("unknown", "")
    if mistake:
        answer = _spoil(answer, [x.partition(": ")[0] for x in shown], rng)
    thought = f"{sentence} So the answer is {answer}." if sentence else (
        f"So the answer is {answer}." if answer != "unknown" else "The passages shown do not give the answer. So the answer is unknown."
    )
    env.step(answer_text(thought, answer))


def _why(name: str, title: str, question: str, shown: list[str], first: bool) -> str:
    """The thought before a search: where its query comes from."""
    if name == "title":
        if first:
            return f"Now: {question} Look up {title}."
        naming = next((s for x in reversed(shown) for s in _sentences(x.partition(": ")[2]) if title in s), None)
        return f"{naming} Next, look up {title}." if naming else f"Next, look up {title}."
    if name == "title_question":
        if any(x.startswith(f"{title}: ") for x in shown):  # titles repeat: a page of that name, not the passage needed
            return f"These {title} passages are not the one needed. Search {title} with the question."
        return f"{title} is not among the results. Search {title} with the question."
    return "Search the question as written."


def _contains(text: str, phrase: str) -> bool:
    phrase = normalize_answer(phrase)
    return bool(phrase) and f" {phrase} " in f" {normalize_answer(text)} "


def _from_evidence(question: Question, lines: list[str]) -> tuple[str, str]:
    """The answer and the sentence that states it, if a shown gold passage does; ("unknown", "") if none does.

    yes and no are never written in a passage: they come from comparing what was shown.
    """
    if normalize_answer(question.answer) in ("yes", "no"):
        return question.answer, ""
    for gold in question.golds:  # the answer first, then its aliases
        for line in lines:
            if _contains(line, gold):
                text = line.partition(": ")[2]
                return gold, next((s for s in _sentences(text) if _contains(s, gold)), "")
    return "unknown", ""


def _spoil(answer: str, titles: list[str], rng: random.Random) -> str:
    """A plausible wrong answer: another year, or another name the expert has read."""
    if answer.isdigit():
        return str(int(answer) + rng.choice([-1, 1]) * rng.randint(1, 30))
    others = sorted({t for t in titles if normalize_answer(t) != normalize_answer(answer)})
    return rng.choice(others) if others else "unknown"


def trajectory_row(env: QAEnv, question: Question, teacher: str, sample: int, **fields: Any) -> dict[str, Any]:
    """An episode, with the answer's EM and F1; `fields` as for `EpisodeRow.of`."""
    evaluation = score_answer(question, env.answer)
    return EpisodeRow.of(
        env, question.idx, question.level, teacher, sample, task={"hops": question.hops, "kind": question.kind, "source": question.source},
        tools=json.dumps(env.tool_schemas()), evaluation=evaluation, success=evaluation["em"] == 1.0, **fields,
    ).row()


def run_episode(
    teacher: Teacher, tools: QATools, question: Question, sample: int, *, seed: int, max_turns: int = 8, fault_rate: float = 0.0
) -> dict[str, Any]:
    # Every episode has its own seeds, so results do not depend on run order or concurrency.
    env = QAEnv(tools, max_turns=max_turns, fault_rate=fault_rate, seed=hash_seed(seed, "faults", question.idx, sample))
    env.reset(question)
    teacher.episode(env, question, random.Random(hash_seed(seed, "teacher", question.idx, sample)))
    return trajectory_row(env, question, teacher.name, sample)
