"""Fault tolerance: garbled model output, failing servers, failing tools, leaked secrets, killed stages.

Five sections, one function each; every count lands in the JSON line printed last.

- fuzz: seeded mutations of real expert outputs (byte flips, truncation, tag
  soup, random JSON, huge numbers, unicode, splices, repeats) fed to the
  tool-call parser, TravelEnv and QAEnv (step, then the trajectory row distill
  would write), the rules formatter, the evaluator, and the reward functions.
  A crash is any exception; a violation is a reward outside its range.
- servers: real local HTTP servers that refuse, fail (HTTP 500), hang, send
  malformed JSON, cut the body short or rate-limit (429 + Retry-After), against
  the OpenAI teacher, the llm formatter and the OpenAI backend. Records the
  time to fail and whether the failure is the project's own error (a
  `star.service.ServiceError`; for the formatter, whose contract is never to
  raise, an undelivered plan with the reason) rather than a raw exception.
  Then each client against a server whose first reply is a 429 with
  Retry-After (1 s, as a number and as an HTTP date) and whose second is
  good: `server_retry_after_honoured` counts the clients whose retry came no
  earlier than asked, in both forms, and got the reply.
- tool_faults: the scripted expert in TravelEnv at fault rates 0 to 0.9:
  episodes completed, injected faults, recoveries (as `call_breakdown` counts them).
- secrets: a planted OPENAI_API_KEY, a teacher, formatter and backend against
  a local server that records requests, a stage run logged to a temporary
  MLflow store and, in the full mode, the real distill stage in a subprocess
  with its own Prefect home; then every byte written is searched for the key.
  The key belongs only in the Authorization header the server receives.
- kills: `kill -9` at random points of the work (while the stage's MLflow run is
  open) of distill, sft, grpo, infer and their QA counterparts in a fresh
  git+DVC repo on the micro profile, then a rerun:
  resumed, identical to the uninterrupted run, half outputs, MLflow runs left RUNNING.

Usage:
    python bench/faults.py              # fuzz 10,000, servers, tool faults, secrets; no kills (under a minute)
    python bench/faults.py --full       # fuzz 100,000 and 10 kills (about 25 minutes on 2 shared cores)
    python bench/faults.py --fuzz 2000 --kills 0 --seed 3
    python bench/faults.py --only kills --kills 2                      # the kills section alone
    python bench/faults.py --only kills --kills 1 --kill-stages sft    # one kill of one stage
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import contextlib
import email.utils
import io
import json
import logging
import math
import random
import re
import secrets as secrets_module
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from flows.serve import free_port, prefect_server  # noqa: E402
from star.env.core import arguments_json  # noqa: E402
from star.env.parse import Action, parse_action  # noqa: E402
from star.qa.env import QAEnv  # noqa: E402
from star.qa.expert import QAExpert  # noqa: E402
from star.qa.expert import run_episode as qa_run_episode  # noqa: E402
from star.qa.expert import trajectory_row as qa_trajectory_row  # noqa: E402
from star.qa.rewards import score_episode  # noqa: E402
from star.qa.search import QATools, SearchIndex  # noqa: E402
from star.qa.specs import QARewardParams, QAWorldSpec, QuestionSpec  # noqa: E402
from star.qa.synthesize import synthesize_questions  # noqa: E402
from star.qa.world import build_world  # noqa: E402
from star.service import ServiceError  # noqa: E402
from star.train.grpo_params import GRPOParams, ProcessRewards  # noqa: E402
from star.train.process import KIND_GROUPS, call_breakdown, call_kinds, process_reward  # noqa: E402
from star.travel.distill import ExpertTeacher, run_episode, trajectory_row  # noqa: E402
from star.travel.env import TravelEnv  # noqa: E402
from star.travel.evaluate import MODES, evaluate_plan  # noqa: E402
from star.travel.expert import Expert  # noqa: E402
from star.travel.format import format_itinerary, format_rules  # noqa: E402
from star.travel.plan import Day, Plan, plan_from_submission  # noqa: E402
from star.travel.rewards import KINDS, Scorer  # noqa: E402
from star.travel.sandbox_index import index_for  # noqa: E402
from star.travel.specs import SynthesisSpec, WorldSpec  # noqa: E402
from star.travel.synthesize import Synthesizer  # noqa: E402
from star.travel.synthetic import generate_world  # noqa: E402
from star.travel.tools import TravelTools  # noqa: E402

LOCAL = "127.0.0.1"
os.environ["NO_PROXY"] = ",".join(filter(None, [os.environ.get("NO_PROXY"), LOCAL, "localhost"]))
SERVER_KEY_ENV = "STAR_FAULTS_BENCH_KEY"  # a dummy key for the server section
HANG_S = 1.0  # one fuzz input running longer than this is a hang (the slowest normal ones take ~0.1 s)
EPS = 1e-9  # rounding allowed when checking a reward's range


# ------------------------------------------------------------------ the seed corpus


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


# ------------------------------------------------------------------ mutations

TAGS = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>", "<tool_response>", "</tool_response>",
    "<", ">", "</", "<<answer>>", "<answer", "tool_call>", "<TOOL_CALL>", "<|im_end|>", "<|im_start|>assistant\n", "<think/>",
]  # fmt: skip
UNICODE = [
    "\x00", "\u200b", "\u200f", "\u202e", "\ufeff", "\u2028", "\r", "\r\n", "\t", "\x0b", "\x85", "\xa0", "é", "e\u0301", "İ", "ß",
    "\ufb01", "２０２２", "١٢", "🙂", "👩\u200d👩\u200d👧", "\ud800", "\udfff", "Ω", "中文", "ا", "\U0010ffff", "\\n", "\\u0000", "\\",
]  # fmt: skip
NUMBERS = ["0", "-1", "-0", "1e999", "-1e999", "1e-400", "NaN", "Infinity", "-Infinity", "1" * 400, "9" * 5000, str(2**64), str(-(2**100)), "0x1F", "1_000", "3.0", "٣"]
STRINGS = ["", " ", "-", "null", "None", "Day 1:", "from A to B", "Flight Number: F0001", ";", ",", "\n", "x" * 10_000, "🙂" * 50, "\ud800"]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON-ish value: odd numbers, odd strings, nesting."""
    roll = rng.random()
    if roll < 0.1:
        return None
    if roll < 0.18:
        return rng.random() < 0.5
    if roll < 0.3:
        return rng.choice([0, -1, 1, 2**31, 2**63, -(2**100), 10**400])
    if roll < 0.4:
        return rng.choice([0.5, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, 5e-324])
    if roll < 0.7 or depth >= 3:
        return rng.choice(STRINGS + UNICODE + TAGS)
    if roll < 0.85:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(STRINGS + ["name", "arguments", "city", "date", "days", "plan"]): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _dumps(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, TypeError):
        return repr(value)


def _at(rng: random.Random, text: str) -> int:
    return rng.randint(0, len(text))


def flip_bytes(rng: random.Random, text: str, pool: list[str]) -> str:
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    for _ in range(rng.randint(1, 8)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return data.decode("utf-8", rng.choice(["replace", "surrogateescape", "ignore"]))


def truncate(rng: random.Random, text: str, pool: list[str]) -> str:
    cut = _at(rng, text)
    return text[:cut] if rng.random() < 0.8 else text[cut:]


def tag_soup(rng: random.Random, text: str, pool: list[str]) -> str:
    for _ in range(rng.randint(1, 6)):
        roll, at = rng.random(), _at(rng, text)
        if roll < 0.5:
            text = text[:at] + rng.choice(TAGS) + text[at:]
        elif roll < 0.75:
            tag = rng.choice(TAGS)
            text = text.replace(tag, "", 1) if tag in text else text
        else:
            text = text[:at] + rng.choice(TAGS) + rng.choice(pool)[:200] + rng.choice(TAGS) + text[at:]
    return text


def random_json(rng: random.Random, text: str, pool: list[str]) -> str:
    value = random_value(rng)
    if rng.random() < 0.5:
        value = {"name": rng.choice(["SearchFlight", "SearchCity", "Search", "searchflight", "", "Nope"]), "arguments": value}
    body = _dumps(value)
    if rng.random() < 0.2:
        body = body[: _at(rng, body)]
    if "<tool_call>" in text and rng.random() < 0.8:
        return re.sub(r"<tool_call>.*?(</tool_call>|$)", lambda m: f"<tool_call>{body}{m.group(1)}", text, count=1, flags=re.S)
    return text[: _at(rng, text)] + f"<tool_call>{body}</tool_call>"


def mutate_arguments(rng: random.Random, text: str, pool: list[str]) -> str:
    """Keep a call's JSON valid but its name or arguments wrong: deep paths of the tools."""
    match = re.search(r"<tool_call>(.*?)</tool_call>", text, re.S)
    if not match:
        return random_json(rng, text, pool)
    try:
        call = json.loads(match.group(1))
        args = dict(call.get("arguments") or {})
    except (ValueError, AttributeError, TypeError, RecursionError):
        return random_json(rng, text, pool)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        keys = list(args)
        if roll < 0.4 and keys:
            key = rng.choice(keys)
            args[key] = random_value(rng) if rng.random() < 0.5 else mutate(rng, str(args[key]), pool, steps=1)
        elif roll < 0.55 and keys:
            args.pop(rng.choice(keys))
        elif roll < 0.7:
            args[rng.choice(["extra", "city", "date", "nights", "room_type", "query", ""])] = random_value(rng)
        elif roll < 0.85:
            call["name"] = rng.choice(["SearchFlight", "GoogleDistanceMatrix", "SearchAccommodation", "SearchRestaurant", "SearchAttraction", "SearchCity", "Search", "search", " SearchCity", "Search\x00"])
        else:
            call["arguments"] = _dumps(args) if rng.random() < 0.5 else random_value(rng)  # arguments as a string, or junk
    if isinstance(call.get("arguments"), dict) or "arguments" not in call:
        call["arguments"] = args
    return text[: match.start(1)] + _dumps(call) + text[match.end(1) :]


def huge_numbers(rng: random.Random, text: str, pool: list[str]) -> str:
    return re.sub(r"\d+", lambda m: rng.choice(NUMBERS) if rng.random() < 0.4 else m.group(), text)


def unicode(rng: random.Random, text: str, pool: list[str]) -> str:
    for _ in range(rng.randint(1, 10)):
        at = _at(rng, text)
        text = text[:at] + rng.choice(UNICODE) + text[at:]
    return text


def splice(rng: random.Random, text: str, pool: list[str]) -> str:
    other = rng.choice(pool)
    return text[: _at(rng, text)] + other[_at(rng, other) :]


def repeat(rng: random.Random, text: str, pool: list[str]) -> str:
    if not text:
        return text
    start = rng.randrange(len(text))
    span = text[start : start + rng.randint(1, 200)]
    times = rng.choice([2, 10, 100, 2000])
    return text[:start] + span * times + text[start:]


def nesting(rng: random.Random, text: str, pool: list[str]) -> str:
    n = rng.choice([50, 1000, 20_000])
    inner = rng.choice(["[" * n + "]" * n, '{"a":' * n + "1" + "}" * n, "[" * n])
    return random_json(rng, text, pool).replace("<tool_call>", f"<tool_call>{inner}", 1) if rng.random() < 0.3 else f"<tool_call>{inner}</tool_call>"


def lines(rng: random.Random, text: str, pool: list[str]) -> str:
    """Itinerary damage: lines shuffled, dropped, doubled, days renumbered."""
    rows = text.split("\n")
    roll = rng.random()
    if roll < 0.3:
        rng.shuffle(rows)
    elif roll < 0.5 and rows:
        del rows[rng.randrange(len(rows))]
    elif roll < 0.7 and rows:
        rows.insert(rng.randrange(len(rows)), rng.choice(rows))
    else:
        rows = [re.sub(r"^Day \d+", lambda m: f"Day {rng.choice(['0', '-1', '999999', '1' * 30, '٣', '3.5', ''])}", r) for r in rows]
    return "\n".join(rows)


MUTATORS: list[Callable[[random.Random, str, list[str]], str]] = [
    flip_bytes, truncate, tag_soup, random_json, mutate_arguments, huge_numbers, unicode, splice, repeat, nesting, lines,
]  # fmt: skip
MAX_CHARS = 100_000


def mutate(rng: random.Random, text: str, pool: list[str], steps: int | None = None) -> str:
    for _ in range(steps or rng.randint(1, 3)):
        text = rng.choice(MUTATORS)(rng, text, pool)[:MAX_CHARS]
    return text


def mutate_submission(rng: random.Random, row: dict, pool: list[str]) -> dict:
    """A submission row with wrong types, missing keys, odd day numbers or a plan that is not a list."""
    row = json.loads(json.dumps(row))
    days = row.get("plan") or []
    roll = rng.random()
    if roll < 0.1:
        row["plan"] = random_value(rng)
    elif roll < 0.2:
        text = json.dumps(days)
        row["plan"] = text[: _at(rng, text)] if rng.random() < 0.5 else text
    elif roll < 0.3 and days:
        row["plan"] = days * rng.choice([2, 10, 60])
    for _ in range(rng.randint(1, 6)):
        if not isinstance(row["plan"], list) or not row["plan"]:
            break
        day = rng.choice(row["plan"])
        if not isinstance(day, dict):
            continue
        key = rng.choice(list(day) + ["day", "extra"])
        kind = rng.random()
        if kind < 0.35:
            day[key] = random_value(rng)
        elif kind < 0.7 and isinstance(day.get(key), str):
            day[key] = mutate(rng, day[key], pool, steps=1)
        else:
            day.pop(key, None)
    if rng.random() < 0.1:
        row["idx"] = random_value(rng)
    return row


# ------------------------------------------------------------------ fuzz


class Hang(BaseException):
    """Raised by the alarm inside a fuzz input that runs too long (not an Exception: the code under test must not catch it)."""


@dataclass
class TargetResult:
    inputs: int = 0
    crashes: int = 0
    violations: int = 0  # ran, but broke a promise (a reward outside its range)
    hangs: int = 0
    slowest_s: float = 0.0
    problems: dict[str, int] = field(default_factory=dict)  # signature -> count
    examples: list[dict] = field(default_factory=list)  # the first input of each signature


def _alarm(signum, frame):
    raise Hang()


def _where(exc: BaseException) -> str:
    """The deepest frame in the project's library (else the deepest frame) of an exception's traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(ROOT / "star")]
    frame = (ours or frames)[-1]
    path = Path(frame.filename).resolve()
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return f"{name}:{frame.lineno} in {frame.name}"


def run_target(name: str, make: Callable[[random.Random], Any], run: Callable[[Any], bool | None], n: int, seed: int, keep: int = 5) -> TargetResult:
    """`make` draws an input, `run` exercises the target on it: any exception is a crash, a False return a violation,
    an input running over HANG_S a hang. Problems are grouped by signature (what, and where in star/)."""
    rng = random.Random(f"{seed}:{name}")
    result = TargetResult()
    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    previous = signal.signal(signal.SIGALRM, _alarm) if use_alarm else None
    try:
        for i in range(n):
            item = make(rng)
            start = time.perf_counter()
            signature = message = trace = None
            try:
                if use_alarm:
                    signal.setitimer(signal.ITIMER_REAL, HANG_S)
                try:
                    ok = run(item)
                finally:
                    if use_alarm:
                        signal.setitimer(signal.ITIMER_REAL, 0)
                if ok is False:
                    result.violations += 1
                    signature = message = "violation"
            except Hang as exc:
                result.hangs += 1
                signature, message = f"hang in {_where(exc)}", f"over {HANG_S:g} s"
            except Exception as exc:  # any exception is what we count
                result.crashes += 1
                signature, message, trace = f"{type(exc).__name__} at {_where(exc)}", f"{type(exc).__name__}: {str(exc)[:200]}", traceback.format_exc()[-1500:]
            result.slowest_s = max(result.slowest_s, time.perf_counter() - start)
            if signature is not None:
                if signature not in result.problems and len(result.examples) < keep:
                    result.examples.append({"input": i, "signature": signature, "message": message, "item": repr(item)[:400], "traceback": trace})
                result.problems[signature] = result.problems.get(signature, 0) + 1
            result.inputs += 1
    finally:
        if use_alarm:
            signal.signal(signal.SIGALRM, previous)
    return result


def fuzz_targets(c: Corpus) -> dict[str, tuple[Callable, Callable]]:
    """name -> (make, run) for every target."""
    travel_pool = c.travel_calls + [a for _, a in c.travel_answers]
    qa_pool = c.qa_calls + [a for _, a in c.qa_answers]
    everything = travel_pool + qa_pool
    travel_env = TravelEnv(c.tools, max_turns=6, fault_rate=0.1, seed=0)
    qa_env = QAEnv(c.qa_tools, max_turns=6, fault_rate=0.1, seed=0)
    grpo_params = {kind: GRPOParams(reward=kind.upper(), steps=10) for kind in KINDS}
    qa_params = [QARewardParams(outcome=o) for o in ("em", "f1")]
    known_kinds = list(KIND_GROUPS) + ["", "fault ", "OK", "answer", "after_done"]

    def turns(rng, calls, answers, pool):
        picked = [mutate(rng, rng.choice(calls), pool) if rng.random() < 0.8 else rng.choice(calls) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.7:
            picked.append(mutate(rng, rng.choice(answers)[1], pool))
        return picked

    def play(env, task, texts):
        env.reset(task)
        for text in texts:
            if env.done:
                break
            env.step(text)

    # parse: any text (and now and then not text at all)
    def make_parse(rng):
        return random_value(rng) if rng.random() < 0.05 else mutate(rng, rng.choice(everything), everything)

    def run_parse(text):
        return isinstance(parse_action(text), Action)

    # TravelEnv: a few garbled turns, then the row distill would write
    def make_travel(rng):
        return rng.choice(c.queries), turns(rng, c.travel_calls, c.travel_answers, travel_pool)

    def run_travel(item):
        query, texts = item
        play(travel_env, query, texts)
        json.dumps(trajectory_row(travel_env, query, "fuzz", 0, c.index), sort_keys=True)

    def make_qa(rng):
        return rng.choice(c.questions), turns(rng, c.qa_calls, c.qa_answers, qa_pool)

    def run_qa(item):
        question, texts = item
        play(qa_env, question, texts)
        json.dumps(qa_trajectory_row(qa_env, question, "fuzz", 0), sort_keys=True)

    # the rules formatter: garbled final answers, with and without their query
    def make_format(rng):
        query, text = rng.choice(c.travel_answers)
        return (query if rng.random() < 0.8 else None), mutate(rng, text, travel_pool), rng.random() < 0.2

    def run_format(item):
        query, text, dispatch = item
        plan = format_itinerary(text, query, kind="rules") if dispatch else format_rules(text, query)
        json.dumps(plan.to_submission())
        return isinstance(plan, Plan) and (plan.delivered or plan.error is not None)

    # the evaluator: plans parsed from garbled answers, garbled submissions, fields of any type
    def make_evaluate(rng):
        roll = rng.random()
        if roll < 0.4:
            query, text = rng.choice(c.travel_answers)
            return query, mutate(rng, text, travel_pool)
        if roll < 0.9:
            query, row = rng.choice(c.submissions)
            return query, mutate_submission(rng, row, travel_pool)
        query = rng.choice(c.queries)
        return query, Plan(idx=query.idx, days=[Day(*[random_value(rng) for _ in range(8)]) for _ in range(rng.randint(1, 8))])

    def run_evaluate(item):
        query, raw = item
        # the plan as the format stage makes it from an answer, or as a submission file holds it
        plan = format_rules(raw, query) if isinstance(raw, str) else plan_from_submission(raw) if isinstance(raw, dict) else raw
        for mode in MODES:
            evaluation = evaluate_plan(query, plan, c.index, mode)
            json.dumps(evaluation.to_dict())
            if not isinstance(evaluation.final_pass, bool):
                return False
        return True

    # travel rewards: the GRPO scorer on episodes ending in a garbled plan
    def make_travel_reward(rng):
        query, texts = make_travel(rng)
        return query, texts, rng.choice(KINDS), rng.randint(0, 12)

    def run_travel_reward(item):
        query, texts, kind, step = item
        play(travel_env, query, texts)
        scores = Scorer(c.index, grpo_params[kind])(query, travel_env, step)
        weight = grpo_params[kind].process.weight
        return 0.0 <= scores["outcome"] <= 1.0 and -weight - EPS <= scores["reward"] - scores["outcome"] <= weight + EPS and all(math.isfinite(v) for v in scores.values())

    def make_qa_reward(rng):
        question, texts = make_qa(rng)
        return question, texts, rng.randrange(2)

    def run_qa_reward(item):
        question, texts, which = item
        play(qa_env, question, texts)
        params = qa_params[which]
        scores = score_episode(question, qa_env, params)
        bound = params.format_weight + params.process_weight
        return 0.0 <= scores["outcome"] <= 1.0 and -params.process_weight - EPS <= scores["reward"] - scores["outcome"] <= bound + EPS and all(math.isfinite(v) for v in scores.values())

    # process rewards: any kinds, any finite values
    def make_process(rng):
        kinds = [rng.choice(known_kinds) if rng.random() < 0.9 else mutate(rng, rng.choice(known_kinds) or "ok", everything, steps=1) for _ in range(rng.randint(0, 30))]
        values = ProcessRewards(weight=rng.uniform(0, 2), **{k: rng.uniform(-3, 3) for k in ("informative", "repeated", "invalid", "failed")})
        rows = [arguments_json({"name": rng.choice(["Search", "SearchCity", ""]), "arguments": random_value(rng), "kind": k}) for k in kinds]
        return kinds, values, rows

    def run_process(item):
        kinds, values, rows = item
        score = process_reward(kinds, values)
        breakdown = call_breakdown(kinds)
        return -1.0 <= score <= 1.0 and all(0.0 <= v <= 1.0 for v in breakdown.values()) and call_kinds(rows) == kinds

    return {
        "parse": (make_parse, run_parse),
        "travel_env": (make_travel, run_travel),
        "qa_env": (make_qa, run_qa),
        "format": (make_format, run_format),
        "evaluate": (make_evaluate, run_evaluate),
        "travel_rewards": (make_travel_reward, run_travel_reward),
        "qa_rewards": (make_qa_reward, run_qa_reward),
        "process_rewards": (make_process, run_process),
    }


def fuzz(corpus: Corpus, n: int, seed: int = 0, targets: dict | None = None) -> dict[str, Any]:
    """`n` inputs shared evenly by the targets; crashes, violations and hangs per target."""
    targets = targets or fuzz_targets(corpus)
    share, extra = divmod(n, len(targets))
    results: dict[str, TargetResult] = {}
    start = time.perf_counter()
    for i, (name, (make, run)) in enumerate(targets.items()):
        t0 = time.perf_counter()
        results[name] = r = run_target(name, make, run, share + (i < extra), seed)
        print(f"fuzz {name:16s} {r.inputs:7,d} inputs  crashes {r.crashes}  violations {r.violations}  hangs {r.hangs}  slowest {r.slowest_s * 1000:7.1f} ms  ({time.perf_counter() - t0:.1f} s)")
        for signature, count in r.problems.items():
            print(f"  {count:5d} x {signature}")
        for example in r.examples:
            print(f"  first: input #{example['input']} (seed {seed}): {example['message']}\n    {example['item']}")
            if example["traceback"]:
                print("    " + example["traceback"].strip().replace("\n", "\n    "))
    inputs = sum(r.inputs for r in results.values())
    crashes = sum(r.crashes for r in results.values())
    return {
        "inputs": inputs,
        "crashes": crashes,
        "violations": sum(r.violations for r in results.values()),
        "hangs": sum(r.hangs for r in results.values()),
        "crash_rate": crashes / max(inputs, 1),
        "seconds": round(time.perf_counter() - start, 1),
        "targets": {k: {"inputs": r.inputs, "crashes": r.crashes, "violations": r.violations, "hangs": r.hangs, "slowest_ms": round(r.slowest_s * 1000, 1), "problems": r.problems} for k, r in results.items()},
    }


# ------------------------------------------------------------------ local servers


def completion(content: str, model: str = "m") -> dict:
    return {
        "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


ANSWER = "<think>Done.</think>\n<answer>\nDay 1: from A to B\nTransport: -\n</answer>"
PLAN_JSON = json.dumps({"plan": [{"days": 1, "current_city": "from A to B", "transportation": "-", "breakfast": "-", "attraction": "-", "lunch": "-", "dinner": "-", "accommodation": "-"}]})


class FaultServer:
    """A local OpenAI-compatible server that misbehaves one way on every request.

    Modes: http500, malformed (invalid JSON), wrong_shape (valid JSON, not a
    completion: a 200 holding an error object), truncated (the body cut short, then the connection closed),
    rate429 (429 with Retry-After: `retry_after` seconds, or with `http_date` a date at
    least that far ahead; after `limit` such replies, if given, it answers as record does),
    hang (accepts and never answers), closed (nothing listens), record (answers well;
    the model "echo" gets a 400 whose body repeats the Authorization header, as some servers do).
    """

    def __init__(self, mode: str, retry_after: float = 1.0, http_date: bool = False, limit: int | None = None):
        self.mode = mode
        self.http_date = http_date
        self.limit = limit
        self.requests: list[dict] = []  # {"t" (monotonic), "wall", "auth", "body", and for a 429 "until": the wall time it asked to wait for}
        self._held: list[socket.socket] = []
        self._server = self._listener = None
        if mode == "closed":
            self.port = free_port()  # closed again once free_port returns
        elif mode == "hang":
            self._listener = socket.create_server((LOCAL, 0))
            self.port = self._listener.getsockname()[1]
            threading.Thread(target=self._hold, daemon=True).start()
        else:
            self._server = ThreadingHTTPServer((LOCAL, 0), self._handler(retry_after))
            self._server.daemon_threads = True
            self.port = self._server.server_address[1]
            threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.base_url = f"http://{LOCAL}:{self.port}/v1"

    def _hold(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.requests.append({"t": time.monotonic(), "wall": time.time(), "auth": "", "body": ""})
            self._held.append(conn)  # never read, never answered

    def _handler(self, retry_after: float):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                auth = self.headers.get("Authorization", "")
                request = {"t": time.monotonic(), "wall": time.time(), "auth": auth, "body": body}
                fake.requests.append(request)
                mode = fake.mode
                if mode == "http500":
                    return self._send(500, json.dumps({"error": {"message": "internal error", "type": "server_error"}}).encode())
                if mode == "rate429" and (fake.limit is None or len(fake.requests) <= fake.limit):
                    if fake.http_date:  # whole seconds: the next full second, then `retry_after` more
                        request["until"] = math.floor(request["wall"]) + 1 + math.ceil(retry_after)
                        value = email.utils.formatdate(request["until"], usegmt=True)
                    else:
                        request["until"], value = request["wall"] + retry_after, f"{retry_after:g}"
                    return self._send(429, json.dumps({"error": {"message": "rate limited", "type": "rate_limit"}}).encode(), {"Retry-After": value})
                if mode == "malformed":
                    return self._send(200, b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assis')
                if mode == "wrong_shape":
                    return self._send(200, b'{"object": "error", "message": "upstream model failed"}')
                if mode == "truncated":
                    data = json.dumps(completion(ANSWER)).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 3])
                    self.close_connection = True  # the server closes the socket: the body ends early
                    return
                request = json.loads(body or "{}")
                if request.get("model") == "echo":
                    return self._send(400, json.dumps({"error": {"message": f"invalid request with credentials {auth}", "type": "invalid_request_error"}}).encode())
                content = PLAN_JSON if "response_format" in request else ANSWER
                return self._send(200, json.dumps(completion(content, request.get("model", "m"))).encode())

            def _send(self, status: int, data: bytes, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def gaps(self) -> list[float]:
        times = [r["t"] for r in self.requests]
        return [b - a for a, b in zip(times, times[1:])]

    def waited_as_asked(self) -> bool | None:
        """Whether every request after a 429 came no earlier than its Retry-After asked; None without a retried 429."""
        pairs = [(a["until"], b["wall"]) for a, b in zip(self.requests, self.requests[1:]) if "until" in a]
        return all(wall >= until for until, wall in pairs) if pairs else None

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._listener is not None:
            self._listener.close()
        for conn in self._held:
            conn.close()


def teacher_client(base_url: str, corpus: Corpus, timeout: float, retries: int, key_env: str = SERVER_KEY_ENV, model: str = "m") -> Callable[[], Any]:
    from star.config import OpenAITeacherParams
    from star.travel.openai_teacher import OpenAITeacher

    teacher = OpenAITeacher(OpenAITeacherParams(base_url=base_url, model=model, api_key_env=key_env, max_tokens=16, retries=retries, timeout=timeout), backoff=0.05)
    return lambda: run_episode(teacher, corpus.tools, corpus.index, corpus.queries[0], 0, seed=0, max_turns=2, fault_rate=0.0)


def formatter_client(base_url: str, corpus: Corpus, timeout: float, retries: int, key_env: str = SERVER_KEY_ENV, model: str = "m") -> Callable[[], Any]:
    query, text = corpus.travel_answers[0]
    return lambda: format_itinerary(text, query, kind="llm", base_url=base_url, model=model, api_key_env=key_env, timeout=timeout, retries=retries, backoff=0.05)


def backend_client(base_url: str, corpus: Corpus, timeout: float, retries: int, key_env: str = SERVER_KEY_ENV, model: str = "m") -> Callable[[], Any]:
    from star.agent.backend import Prompt
    from star.agent.openai_backend import OpenAIBackend

    backend = OpenAIBackend(base_url, model, api_key_env=key_env, timeout=timeout, retries=retries)
    return lambda: backend.generate([Prompt([1, 2, 3], [{"role": "user", "content": "Plan a trip."}])], 16)


CLIENTS = {"teacher": teacher_client, "formatter": formatter_client, "backend": backend_client}
SERVER_FAULTS = ("closed", "http500", "hang", "malformed", "wrong_shape", "truncated", "rate429")


def outcome_of(call: Callable[[], Any]) -> tuple[str, bool, str]:
    """(what happened, whether it is the project's clear failure, the message)."""
    try:
        result = call()
    except ServiceError as exc:
        return type(exc).__name__, True, str(exc)
    except Exception as exc:
        return f"raw {type(exc).__name__}", False, f"{type(exc).__name__}: {exc}"
    if isinstance(result, Plan):
        if not result.delivered and result.error:
            return "undelivered plan", True, result.error
        return "delivered plan", False, "a failing server produced a plan"
    return "no error", False, "a failing server produced a result"


def servers(corpus: Corpus, faults: tuple[str, ...] = SERVER_FAULTS, clients: tuple[str, ...] = tuple(CLIENTS), timeout: float = 1.0, retries: int = 1, retry_after: float = 1.0) -> dict[str, Any]:
    """Every client against every faulty server: time to fail, clear or raw failure, requests made."""
    os.environ.setdefault(SERVER_KEY_ENV, "sk-bench-dummy")
    cases = []
    start = time.perf_counter()
    for fault in faults:
        for client in clients:
            server = FaultServer(fault, retry_after=retry_after)
            try:
                call = CLIENTS[client](server.base_url, corpus, timeout, retries)
                t0 = time.perf_counter()
                outcome, clear, message = outcome_of(call)
                seconds = time.perf_counter() - t0
            finally:
                server.close()
            case = {
                "client": client, "fault": fault, "seconds": round(seconds, 2), "outcome": outcome, "clear": clear,
                "one_line": "\n" not in message, "requests": len(server.requests), "message": message[:240],
            }  # fmt: skip
            if fault == "rate429":
                gaps = server.gaps()
                case["retry_after_s"] = retry_after
                case["min_gap_s"] = round(min(gaps), 2) if gaps else None
            cases.append(case)
            mark = "ok " if clear else "RAW"
            print(f"server {fault:11s} {client:9s} {mark} {seconds:5.2f} s  {case['requests']} request(s)  {outcome}: {message[:150]!r}")
    clear = sum(c["clear"] for c in cases)
    honoured = retry_after_check(corpus, clients, retry_after) if "rate429" in faults else {}
    return {
        "cases": len(cases),
        "clear": clear,
        "raw": len(cases) - clear,
        "clear_rate": clear / max(len(cases), 1),
        "max_seconds_to_fail": max((c["seconds"] for c in cases), default=0.0),
        "retry_after_honoured": sum(all(c["honoured"] for c in by_form.values()) for by_form in honoured.values()),
        "retry_after": honoured,
        "seconds": round(time.perf_counter() - start, 1),
        "timeout_s": timeout,
        "retries": retries,
        "by_case": {f"{c['fault']}/{c['client']}": {k: c[k] for k in ("seconds", "outcome", "clear", "requests")} for c in cases},
    }


def retry_after_check(corpus: Corpus, clients: tuple[str, ...] = tuple(CLIENTS), retry_after: float = 1.0, timeout: float = 5.0) -> dict[str, dict[str, dict]]:
    """Each client against a server whose first reply is a 429 asking to wait `retry_after` seconds (as a number, then
    as an HTTP date), and whose second is good: honoured when the retry came no earlier than asked and the call then succeeded.

    `timeout` is above the delay, since a client waits at most its own timeout.
    """
    out: dict[str, dict[str, dict]] = {}
    for client in clients:
        for form in ("seconds", "http_date"):
            server = FaultServer("rate429", retry_after=retry_after, http_date=form == "http_date", limit=1)
            try:
                outcome, _, message = outcome_of(CLIENTS[client](server.base_url, corpus, timeout, 1))
            finally:
                server.close()
            succeeded = outcome in ("no error", "delivered plan")  # what outcome_of calls a result
            waited = server.waited_as_asked()
            gaps = server.gaps()
            asked = server.requests[0]["until"] - server.requests[0]["wall"] if server.requests and "until" in server.requests[0] else None
            case = {
                "asked_s": round(asked, 2) if asked is not None else None, "gap_s": round(gaps[0], 2) if gaps else None,
                "requests": len(server.requests), "outcome": "reply" if succeeded else outcome, "honoured": bool(waited) and succeeded,
            }  # fmt: skip
            out.setdefault(client, {})[form] = case
            mark = "ok " if case["honoured"] else "NO "
            print(f"server retry-after {form:9s} {client:9s} {mark} asked {case['asked_s']} s, retried after {case['gap_s']} s, {case['requests']} request(s), {case['outcome']}" + ("" if succeeded else f": {message[:120]!r}"))
    return out


# ------------------------------------------------------------------ tool faults


def tool_faults(corpus: Corpus, rates: tuple[float, ...] = (0.0, 0.1, 0.3, 0.6, 0.9), episodes: int = 40, max_turns: int = 16) -> dict[str, Any]:
    """The scripted expert as the policy, at each tool fault rate, with the env's turn limit."""
    teacher = ExpertTeacher(Expert())
    queries = (corpus.queries * (episodes // max(len(corpus.queries), 1) + 1))[:episodes]
    out = {}
    for rate in rates:
        totals = dict(episodes=0, completed=0, success=0, calls=0, faults=0, recoveries=0)
        for sample, query in enumerate(queries):
            row = run_episode(teacher, corpus.tools, corpus.index, query, sample, seed=0, max_turns=max_turns, fault_rate=rate)
            kinds = call_kinds(row["calls"])
            faults = kinds.count("fault")
            totals["episodes"] += 1
            totals["completed"] += row["answer"] is not None and not row["truncated"]
            totals["success"] += row["success"]
            totals["calls"] += len(kinds)
            totals["faults"] += faults
            totals["recoveries"] += round(call_breakdown(kinds)["recovery_rate"] * faults)
        totals["completion_rate"] = totals["completed"] / totals["episodes"]
        totals["success_rate"] = totals["success"] / totals["episodes"]
        totals["observed_fault_rate"] = totals["faults"] / max(totals["calls"], 1)
        totals["recovery_rate"] = totals["recoveries"] / totals["faults"] if totals["faults"] else None
        out[str(rate)] = totals
        print(
            f"tool faults {rate:.1f}: {totals['completed']}/{totals['episodes']} completed, {totals['success']} passed, "
            f"{totals['faults']} faults in {totals['calls']} calls, {totals['recoveries']} recovered"
        )
    return out


# ------------------------------------------------------------------ secrets


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """Set (or, with None, unset) environment variables for the block."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def captured_output() -> Iterator[io.StringIO]:
    """Everything logged (DEBUG and up, any logger) and printed in the block."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    # the root logger, plus the loggers that do not pass records up to it
    loggers = [logging.getLogger()] + [lg for lg in map(logging.getLogger, ("openai", "httpx", "httpcore", "mlflow", "prefect", "tenacity")) if not lg.propagate]
    levels = {lg.name: lg.level for lg in loggers}
    watched = [logging.getLogger(n) for n in ("openai", "httpx", "httpcore", "mlflow", "star", "tenacity")]
    watched_levels = [lg.level for lg in watched]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    for lg in watched:
        lg.setLevel(logging.DEBUG)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            yield buffer
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
            lg.setLevel(levels[lg.name])
        for lg, level in zip(watched, watched_levels):
            lg.setLevel(level)


def count_key(key: str, root: Path | None = None, texts: dict[str, str] | None = None) -> dict[str, int]:
    """Occurrences of `key` in every file under `root` (by path below it, two levels) and in `texts`."""
    needle = key.encode()
    counts: dict[str, int] = {}
    if root is not None:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                n = path.read_bytes().count(needle)
                if n:
                    place = "/".join(path.relative_to(root).parts[:2])
                    counts[place] = counts.get(place, 0) + n
                    print(f"secrets: planted key found {n}x in {path.relative_to(root)}")
    for name, text in (texts or {}).items():
        n = text.count(key)
        if n:
            counts[name] = counts.get(name, 0) + n
            print(f"secrets: planted key found {n}x in {name}")
    return counts


def secrets(corpus: Corpus, stage: bool = False, leak: Callable[[str, Path], None] | None = None) -> dict[str, Any]:
    """Plant a key, run the pieces that see it, search everything they wrote.

    In-process, from a working directory inside a temporary folder: the
    teacher, the llm formatter and the OpenAI backend against a recording
    server; a `stage_run` logging params, metrics, a dict and an artifact to a
    temporary sqlite MLflow store. Apart from that, each client once more
    against a server whose 400 body echoes the Authorization header (some
    servers do): the project's messages must not pass the key on. With
    `stage`, the real distill stage runs in a subprocess with teacher.kind
    openai, its own Prefect home and MLflow store, its stdout and stderr kept.
    `leak(key, dir)` is for the tests: a deliberately leaky piece, to show
    the search finds it.
    """
    key = f"sk-PLANTED-{secrets_module.token_hex(16)}"
    server = FaultServer("record")
    tmp = Path(tempfile.mkdtemp(prefix="star-secrets-"))
    cwd, outputs = tmp / "cwd", tmp / "outputs"
    cwd.mkdir()
    outputs.mkdir()
    texts: dict[str, str] = {}
    echoed: dict[str, str] = {}
    stage_result = None
    start = time.perf_counter()
    try:
        clean = dict(MLFLOW_TRACKING_URI=None, DVC_ROOT=None, DVC_EXP_NAME=None, DVC_STAGE=None, DVC_EXP_BASELINE_REV=None)
        with environment(OPENAI_API_KEY=key, **clean), contextlib.chdir(cwd):
            with captured_output() as log:
                # answered: the key goes out in the Authorization header only
                row = teacher_client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY")()
                plan = formatter_client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY")()
                generation = backend_client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY")()
                (outputs / "trajectories.jsonl").write_text(json.dumps(row, sort_keys=True) + "\n")
                (outputs / "plans.jsonl").write_text(json.dumps(plan.to_submission()) + "\n")
                (outputs / "generation.json").write_text(json.dumps(generation[0].text))
                # a stage run: params, metrics, a dict and an artifact, to a temporary store
                import mlflow

                from star.config import TeacherParams
                from star.tracking import stage_run

                params = {"teacher": TeacherParams.model_validate({"kind": "openai", "openai": {"base_url": server.base_url}}).model_dump(mode="json")}
                previous = mlflow.get_tracking_uri()
                with stage_run("distill", params, tmp):
                    mlflow.log_metrics({"trajectories": 1.0})
                    mlflow.log_dict({"row": row}, "distill_metrics.json")
                    mlflow.log_artifact(str(outputs / "trajectories.jsonl"))
                    artifact_uri = mlflow.get_artifact_uri()
                mlflow.set_tracking_uri(previous)  # stage_run points the process at the temporary store
                if leak is not None:
                    leak(key, outputs)
            texts["logs"] = log.getvalue()
            with captured_output() as echo_log:
                for name, client in CLIENTS.items():
                    _, _, message = outcome_of(client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY", model="echo"))
                    echoed[name] = message
                    print(f"error: {name}: {message}", file=sys.stderr)  # as run_stage reports a ServiceError
        if stage:
            stage_result = _secrets_stage(key, server, tmp / "stage")
            texts["stage_output"] = stage_result.pop("output")
        found = count_key(key, tmp, texts)
        files = [f for f in tmp.rglob("*") if f.is_file()]
        prefect_files = [f for f in files if "prefect" in f.relative_to(tmp).parts]
        echo_found = count_key(key, None, {"echo_logs": echo_log.getvalue(), **{f"echo_{k}": v for k, v in echoed.items()}})
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    expected = sum(r["auth"].count(key) for r in server.requests)
    in_bodies = sum(r["body"].count(key) for r in server.requests)
    if in_bodies:
        found["request_bodies"] = in_bodies
    leaks, echo_leaks = sum(found.values()), sum(echo_found.values())
    # star.tracking asks for <store>/mlartifacts; where did this stage run's artifacts go?
    artifacts = artifact_uri.removeprefix("file://")
    inside = Path(artifacts).resolve().is_relative_to((tmp / "mlartifacts").resolve())
    place = Path(artifacts).relative_to(tmp) if Path(artifacts).is_relative_to(tmp) else artifacts
    print(f"secrets: searched {len(files)} files ({len(prefect_files)} in the Prefect home) and {len(texts)} captured outputs")
    print(f"secrets: {leaks} leak(s) of the planted key; {expected} in Authorization headers of {len(server.requests)} requests (expected)")
    print(f"secrets: server echoing the key in a 400: {echo_leaks} occurrence(s) in our messages and logs")
    for name, message in echoed.items():
        print(f"  rejected {name}: {message[:200]}")
    print(f"secrets: the stage run's artifacts went to {place} ({'the store' if inside else 'NOT <store>/mlartifacts'})")
    result = {
        "leaks": leaks,
        "leaks_by_place": found,
        "echo_leaks": echo_leaks,
        "echo_leaks_by_place": echo_found,
        "authorization_headers": expected,
        "requests": len(server.requests),
        "artifacts_in_store": inside,
        "files_scanned": len(files),
        "prefect_files_scanned": len(prefect_files),
        "seconds": round(time.perf_counter() - start, 1),
    }
    if stage_result is not None:
        result["stage"] = stage_result
    return result


def _secrets_stage(key: str, server: FaultServer, work: Path) -> dict[str, Any]:
    """The real distill stage (teacher.kind openai) in a subprocess: its logs, MLflow store and Prefect home."""
    import yaml

    work.mkdir(parents=True)
    world = generate_world(WorldSpec(seed=0, states=2, cities_per_state=3, num_dates=5))
    world.save(work / "data" / "world")
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": 2, "validation": 0, "test": 0})).run()["train"]
    (work / "data" / "queries").mkdir(parents=True)
    (work / "data" / "queries" / "train.jsonl").write_text("".join(json.dumps(q.to_row()) + "\n" for q in queries))
    params = {
        "teacher": {"kind": "openai", "openai": {"base_url": server.base_url, "model": "m", "timeout": 10.0, "retries": 0, "concurrency": 1, "max_tokens": 16}},
        "env": {"max_turns": 2},
    }
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_"))}
    env.update(OPENAI_API_KEY=key, PYTHONPATH=str(ROOT), PREFECT_HOME=str(work / "prefect"), HOME=str(work / "home"), PYTHONUNBUFFERED="1")
    (work / "home").mkdir()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stages.distill"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    print(f"secrets: distill stage subprocess exit {proc.returncode} in {seconds:.1f} s")
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
    return {"rc": proc.returncode, "seconds": round(seconds, 1), "output": proc.stdout + proc.stderr}


# ------------------------------------------------------------------ kills

KILL_STAGES = ("distill", "sft", "grpo", "infer@sft", "qa_distill", "qa_sft", "qa_grpo", "qa_infer@qa_sft")
TRAINED = {"sft": "models/sft", "grpo": "models/grpo", "qa_sft": "models/qa/sft", "qa_grpo": "models/qa/grpo"}
# Where a killed stage keeps what a rerun resumes from.
RESUME_STATE = {
    "distill": "data/.progress",
    "sft": "models/.checkpoints/sft",
    "grpo": "models/.checkpoints/grpo",
    "qa_sft": "models/.checkpoints/qa_sft",
    "qa_grpo": "models/.checkpoints/qa_grpo",
}
KILL_ATTEMPTS = 5  # tries per trial when the stage finishes before its kill
# Knobs over the micro profile, so that training checkpoints (and a kill can land between them).
KILL_PROFILE = {"teacher": {"samples": 4}, "qa": {"teacher": {"samples": 4}}, "sft": {"max_steps": 16, "save_steps": 4}, "grpo": {"steps": 4, "save_steps": 1}}


def dvc_graph(dvc_yaml: Path) -> dict[str, dict[str, list[str]]]:
    """Every stage of dvc.yaml, foreach expanded: {"deps": [...], "outs": [...]} (metrics and plots count as outs)."""
    import yaml

    stages = {}
    for name, stage in yaml.safe_load(dvc_yaml.read_text())["stages"].items():
        items = stage.get("foreach")
        body = stage.get("do", stage)
        expanded = {None: None} if items is None else dict(zip(items, items)) if isinstance(items, list) else items
        for k, item in expanded.items():
            fill = lambda text: str(text).replace("${item}", str(item)).replace("${key}", str(k))  # noqa: E731
            outs = [fill(o if isinstance(o, str) else next(iter(o))) for part in ("outs", "metrics") for o in body.get(part, [])]
            stages[name if k is None else f"{name}@{k}"] = {"deps": [fill(d) for d in body.get("deps", [])], "outs": outs}
    return stages


def upstream_order(graph: dict[str, dict[str, list[str]]], targets: tuple[str, ...]) -> list[str]:
    """The targets and every stage they depend on, each after its dependencies."""
    producer = {out: name for name, stage in graph.items() for out in stage["outs"]}
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in graph[name]["deps"]:
            for out, other in producer.items():
                if other != name and (dep == out or dep.startswith(out.rstrip("/") + "/")):
                    visit(other)
        order.append(name)

    for target in targets:
        visit(target)
    return order


def _merge(base: dict, over: dict, whole: set[str]) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base.get(k) or {}, v, whole) if isinstance(v, dict) and k not in whole else v
    return out


def make_micro_repo(repo: Path, env: dict[str, str]) -> None:
    """A fresh git + DVC repo of the project with the micro profile (and KILL_PROFILE) written into params.yaml."""
    import yaml

    from stages.profile import WHOLE

    for name in ("dvc.yaml", "params.yaml", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    for name in ("star", "stages", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for profile in (yaml.safe_load((ROOT / "params.micro.yaml").read_text()), KILL_PROFILE):
        params = _merge(params, profile, WHOLE)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in ("git init -q", "git config user.email bench@example.com", "git config user.name bench", "dvc init -q", "dvc config core.analytics false", "git add -A", "git commit -qm init"):
        subprocess.run(cmd, shell=True, cwd=repo, env=env, check=True, capture_output=True, timeout=120)


def _stage_process(parent: Any) -> Any | None:
    """The stage's python process among the descendants of a `dvc repro`."""
    import psutil

    try:
        for child in parent.children(recursive=True):
            try:
                cmd = child.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if "-m" in cmd and any(part.startswith("stages.") for part in cmd):
                return child
    except psutil.NoSuchProcess:
        pass
    return None


def run_and_kill(cmd: list[str], cwd: Path, env: dict[str, str], kill_after: float | None = None, timeout: float = 900) -> dict[str, Any]:
    """Run `cmd`; with `kill_after`, kill -9 its stage process (a descendant running `-m stages.*`) that many
    seconds into its work.

    The work is the time the stage's MLflow run is open in `cwd`'s store: before it the process
    only imports and loads, and after it only shuts down, so a kill there tests nothing a rerun
    must resume. Returns rc, the work's length (seconds; to the process's exit, or to the end of
    `cmd`, when the run was not seen to close), whether the kill was sent, and the output's tail.
    """
    import psutil

    log = tempfile.TemporaryFile("w+")
    runs_before = _stage_runs(cwd)[0]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    started = ended = child = None
    killed = False
    while proc.poll() is None and time.monotonic() < deadline:
        now = time.monotonic()
        if child is None:
            child = _stage_process(parent)
        total, running = _stage_runs(cwd)
        if started is None and total > runs_before:
            started = now
        elif started is not None and ended is None and total >= 0 and running == 0:
            ended = now  # the run closed: the stage's work is done
        if child is not None and ended is None:
            try:
                alive = child.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                alive = False
            if not alive:
                ended = now  # it died before its run closed
            elif started is not None and kill_after is not None and now - started >= kill_after:
                try:
                    child.send_signal(signal.SIGKILL)
                    killed = True
                except psutil.NoSuchProcess:
                    pass  # it finished first
                ended = now
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    work = ((ended or time.monotonic()) - started) if started is not None else None
    log.seek(0)
    output = _without_progress(log.read())
    log.close()
    return {"rc": proc.returncode, "lifetime_s": work, "killed": killed, "output": output[-3000:]}


def _stage_runs(repo: Path) -> tuple[int, int]:
    """(stage runs, of which RUNNING) in the repository's MLflow store; (-1, -1) while it is locked."""
    import sqlite3

    try:
        status = _mlflow_status(repo)
    except sqlite3.OperationalError:
        return -1, -1
    return sum(status.values()), status.get("RUNNING", 0)


def _without_progress(text: str) -> str:
    """The output with progress bars dropped, so a failure's message is what the tail keeps."""
    lines = (line.rsplit("\r", 1)[-1] for line in text.split("\n"))
    return "\n".join(line for line in lines if not re.search(r"\d+%\|", line))


def repro(repo: Path, env: dict[str, str], stage: str, kill_after: float | None = None, force: bool = True) -> dict[str, Any]:
    """`dvc repro -s [--force] stage` (--force: run the command even when DVC's run cache has the result)."""
    cmd = [str(Path(sys.executable).parent / "dvc"), "repro", "-s", *(["--force"] if force else []), stage]
    return run_and_kill(cmd, repo, env, kill_after)


def _digest(path: Path) -> str | None:
    from star.io import content_digest

    return content_digest(path) if path.exists() else None


def _close_weights(a: Path, b: Path) -> bool:
    """Whether two saved models hold the same tensors within SFT's resume tolerance (tests/test_sft.py)."""
    import torch
    from safetensors.torch import load_file

    def load(directory: Path) -> dict:
        return {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(f).items()}

    try:
        x, y = load(a), load(b)
    except Exception:  # a file cut short is not the same model
        return False
    return x.keys() == y.keys() and all(torch.allclose(x[k].float(), y[k].float(), rtol=1e-4, atol=1e-5) for k in x)


def _mlflow_status(repo: Path) -> dict[str, int]:
    import sqlite3

    db = repo / "mlflow.db"
    if not db.exists():
        return {}
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "select r.status, count(*) from runs r join tags t on t.run_uuid = r.run_uuid and t.key = 'star.role' and t.value = 'stage' group by r.status"
        ).fetchall()
    return dict(rows)


def _state_after_kill(repo: Path, stage: str) -> int:
    """What a rerun can resume from: persisted chunks of episodes, or checkpoint directories (complete ones for SFT)."""
    root = repo / RESUME_STATE.get(stage, "-")
    if not root.exists():
        return 0
    if stage == "distill":  # one result file per finished chunk, under data/.progress/distill/<fingerprint>/
        return sum(1 for p in (root / "distill").glob("*/*") if p.is_file() and not p.name.startswith("."))
    checkpoints = [p for p in root.glob("*/checkpoint-*") if p.is_dir()]
    if stage in ("sft", "qa_sft"):
        checkpoints = [p for p in checkpoints if (p / "trainer_state.json").is_file()]
    return len(checkpoints)


def _leftovers(repo: Path, outs: list[str]) -> int:
    """Temporary siblings (.tmp-*, .old-*) next to the stage's outputs."""
    names = {Path(o).name for o in outs}
    parents = {(repo / o).parent for o in outs}
    return sum(1 for d in parents if d.exists() for p in d.iterdir() if any(p.name.startswith((f".tmp-{n}-", f".old-{n}-")) for n in names))


def _copy(src: Path, dst: Path) -> None:
    if dst.is_dir():
        shutil.rmtree(dst)
    elif dst.exists():
        dst.unlink()
    if src.is_dir():
        shutil.copytree(src, dst)
    elif src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def kills(n: int, seed: int = 0, budget_s: float = 25 * 60, stages: tuple[str, ...] = KILL_STAGES) -> dict[str, Any]:
    """kill -9 at random points of stage runs in a fresh micro repo, rerun, compare with the uninterrupted run.

    The kills go to `stages` in turn (n = 10 covers the eight of KILL_STAGES, distill and sft twice);
    only those stages and what they depend on run uninterrupted first.

    Counted per kill: landed (the stage was still running), resumed (the rerun
    finished), resumed_from_state (the kill left progress rows or checkpoints),
    identical (every compared output equals the uninterrupted run's bytes),
    close (sft/grpo: not the same bytes, same tensors within 1e-4), half
    outputs (an output under its final name that differs from the reference
    right after the kill), temporary siblings, and stage runs left RUNNING in
    MLflow after the rerun. Training curves (reports/train/*.csv) hold
    timings, so they are not compared.
    """
    if n <= 0:
        print("kills: skipped (--kills 0)")
        return {"skipped": True}
    if shutil.which("dvc", path=str(Path(sys.executable).parent)) is None or shutil.which("prefect", path=str(Path(sys.executable).parent)) is None:
        print("kills: skipped (dvc or prefect not found beside the interpreter)")
        return {"skipped": True, "reason": "dvc or prefect not found"}
    start = time.perf_counter()
    rng = random.Random(f"{seed}:kills")
    work = Path(tempfile.mkdtemp(prefix="star-kills-"))
    repo, ref = work / "repo", work / "reference"
    repo.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_"))}
    env.update(PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", PREFECT_HOME=str(work / "prefect"), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    trials: list[dict] = []
    error = None
    try:
        make_micro_repo(repo, env)
        graph = dvc_graph(repo / "dvc.yaml")
        with prefect_server(work / "prefect", env, str(Path(sys.executable).parent / "prefect")) as url:
            env["PREFECT_API_URL"] = url
            # The uninterrupted runs: every stage the kill targets need, once, timed.
            lifetimes: dict[str, float] = {}
            schedule = [stages[i % len(stages)] for i in range(n)]
            for stage in upstream_order(graph, tuple(dict.fromkeys(schedule))):
                r = repro(repo, env, stage, force=False)
                if r["rc"] != 0:
                    raise RuntimeError(f"reference run of {stage} failed:\n{r['output']}")
                lifetimes[stage] = r["lifetime_s"] or 0.0
                print(f"kills: reference {stage} in {lifetimes[stage]:.1f} s")
            for stage in set(schedule):
                for out in graph[stage]["outs"]:
                    _copy(repo / out, ref / out)
            lock = (repo / "dvc.lock").read_text()
            for i, stage in enumerate(schedule):
                if time.perf_counter() - start > budget_s:
                    print(f"kills: time budget spent after {i} kills")
                    break
                outs = graph[stage]["outs"]
                fraction = rng.uniform(0.1, 0.9)
                for attempt in range(1, KILL_ATTEMPTS + 1):
                    killed = repro(repo, env, stage, kill_after=fraction * lifetimes[stage])
                    if killed["killed"] or killed["rc"] != 0 or attempt == KILL_ATTEMPTS:
                        break
                    # It finished before the kill: on a shared machine a stage may run faster than its
                    # reference did. Aim at the same fraction of the run just seen, from a clean start.
                    print(f"kills: {stage} finished in {killed['lifetime_s'] or 0:.1f} s, before the kill at {fraction * lifetimes[stage]:.1f} s; again")
                    lifetimes[stage] = killed["lifetime_s"] or lifetimes[stage]
                    if stage in RESUME_STATE:
                        shutil.rmtree(repo / RESUME_STATE[stage], ignore_errors=True)
                trial: dict[str, Any] = {"stage": stage, "kill_at": round(fraction, 2), "attempts": attempt, "landed": killed["killed"] and killed["rc"] != 0}
                # Right after the kill: outputs under their final names, temporary siblings, resumable state, runs RUNNING.
                compared = [o for o in outs if not o.startswith("reports/train/")]
                trial["half_outputs"] = sum((repo / o).exists() and _digest(repo / o) != _digest(ref / o) and not (o in TRAINED.values() and _close_weights(repo / o, ref / o)) for o in compared)
                trial["tmp_after_kill"] = _leftovers(repo, outs)
                trial["state_after_kill"] = _state_after_kill(repo, stage)
                trial["running_after_kill"] = _mlflow_status(repo).get("RUNNING", 0)
                rerun = repro(repo, env, stage)
                trial["resumed"] = rerun["rc"] == 0
                trial["resumed_from_state"] = trial["resumed"] and trial["state_after_kill"] > 0
                same = {o: _digest(repo / o) == _digest(ref / o) for o in compared}
                trial["identical"] = trial["resumed"] and all(same.values())
                trial["close"] = trial["resumed"] and all(same[o] or (o in TRAINED.values() and _close_weights(repo / o, ref / o)) for o in compared)
                if trial["resumed"] and not trial["identical"]:
                    trial["differs"] = [o for o, s in same.items() if not s]
                trial["tmp_after_rerun"] = _leftovers(repo, outs)
                status = _mlflow_status(repo)
                trial["running_after_rerun"] = status.get("RUNNING", 0)
                trial["killed_runs"] = status.get("KILLED", 0)
                if not trial["resumed"]:
                    trial["rerun_output"] = rerun["output"][-1500:]
                trials.append(trial)
                print(f"kills: {stage} killed at {fraction:.0%} (landed {trial['landed']}), state {trial['state_after_kill']}, rerun ok {trial['resumed']}, identical {trial['identical']}, close {trial['close']}, half {trial['half_outputs']}, RUNNING {trial['running_after_rerun']}")
                # Put the uninterrupted outputs back and clear what this trial left, so every trial starts alike.
                for out in outs:
                    _copy(ref / out, repo / out)
                for d in {(repo / o).parent for o in outs}:
                    for p in [*d.glob(".tmp-*"), *d.glob(".old-*")] if d.exists() else []:
                        shutil.rmtree(p) if p.is_dir() else p.unlink()
                if stage in RESUME_STATE:
                    shutil.rmtree(repo / RESUME_STATE[stage], ignore_errors=True)
                (repo / "dvc.lock").write_text(lock)
    except Exception as exc:  # report what was measured, and why it stopped
        error = f"{type(exc).__name__}: {exc}"[-2000:]
        print(f"kills: stopped: {error}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    landed = [t for t in trials if t["landed"]]
    return {
        "requested": n,
        "trials": len(trials),
        "landed": len(landed),
        "resumed": sum(t["resumed"] for t in landed),
        "resumed_from_state": sum(t["resumed_from_state"] for t in landed),
        "identical": sum(t["identical"] for t in landed),
        "close": sum(t["close"] for t in landed),
        "half_outputs": sum(t["half_outputs"] for t in landed),
        "tmp_after_kill": sum(t["tmp_after_kill"] for t in landed),
        "tmp_after_rerun": sum(t["tmp_after_rerun"] for t in landed),
        "running_after_rerun": max((t["running_after_rerun"] for t in trials), default=0),
        "identical_rate": sum(t["identical"] for t in landed) / max(len(landed), 1),
        "seconds": round(time.perf_counter() - start, 1),
        "error": error,
        "by_trial": trials,
    }


# ------------------------------------------------------------------ main


SECTIONS = ("fuzz", "servers", "tool_faults", "secrets", "kills")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="fuzz 100,000, 10 kills and the real distill stage (up to 25 minutes)")
    parser.add_argument("--fuzz", type=int, default=None, help="fuzz inputs (default 10,000; 100,000 with --full)")
    parser.add_argument("--kills", type=int, default=None, help="kill -9 trials (default 0; 10 with --full)")
    parser.add_argument("--kill-stages", default=",".join(KILL_STAGES), help=f"comma-separated stages the kills go to, in turn (default: {','.join(KILL_STAGES)})")
    parser.add_argument("--kill-budget", type=float, default=25.0, help="minutes for the kills section, reference runs included; no new kill starts after that (default 25)")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections to run (default: all of {','.join(SECTIONS)})")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    n_fuzz = args.fuzz if args.fuzz is not None else (100_000 if args.full else 10_000)
    n_kills = args.kills if args.kills is not None else (10 if args.full else 0)
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    kill_stages = tuple(x.strip() for x in args.kill_stages.split(",") if x.strip())
    if unknown := set(only) - set(SECTIONS):
        parser.error(f"unknown section(s) {sorted(unknown)}; choose from {','.join(SECTIONS)}")
    if not kill_stages or (unknown := set(kill_stages) - set(KILL_STAGES)):
        parser.error(f"--kill-stages: choose from {','.join(KILL_STAGES)}")

    start = time.perf_counter()
    summary: dict[str, Any] = {}
    if set(only) - {"kills"}:
        corpus = build_corpus(seed=args.seed)
        print(f"corpus: {len(corpus.travel_calls)} travel calls, {len(corpus.travel_answers)} answers, {len(corpus.qa_calls)} QA calls ({time.perf_counter() - start:.1f} s)")
    if "fuzz" in only:
        fuzzed = fuzz(corpus, n_fuzz, args.seed)
        summary.update(
            fuzz_inputs=fuzzed["inputs"],
            fuzz_crashes=fuzzed["crashes"],
            fuzz_crash_rate=fuzzed["crash_rate"],
            fuzz_violations=fuzzed["violations"],
            fuzz_hangs=fuzzed["hangs"],
            fuzz_crashes_by_target={k: v["crashes"] for k, v in fuzzed["targets"].items()},
            fuzz_problems={sig: sum(t["problems"].get(sig, 0) for t in fuzzed["targets"].values()) for sig in sorted({sig for t in fuzzed["targets"].values() for sig in t["problems"]})},
        )
    if "servers" in only:
        served = servers(corpus)
        summary.update(
            server_cases=served["cases"],
            server_clear=served["clear"],
            server_raw=served["raw"],
            server_clear_rate=served["clear_rate"],
            server_max_seconds_to_fail=served["max_seconds_to_fail"],
            server_retry_after_honoured=served["retry_after_honoured"],
            server_retry_after_clients=len(served["retry_after"]),
            server_raw_cases=[k for k, v in served["by_case"].items() if not v["clear"]],
        )
    if "tool_faults" in only:
        tools = tool_faults(corpus, episodes=120 if args.full else 40)
        summary["tool_faults"] = {rate: {k: v[k] for k in ("episodes", "completed", "faults", "recoveries", "recovery_rate", "success_rate")} for rate, v in tools.items()}
    if "secrets" in only:
        leaked = secrets(corpus, stage=args.full)
        summary.update(
            secret_leaks=leaked["leaks"],
            secret_leaks_by_place=leaked["leaks_by_place"],
            secret_in_authorization_headers=leaked["authorization_headers"],
            secret_echo_leaks=leaked["echo_leaks"],
            secret_echo_leaks_by_place=leaked["echo_leaks_by_place"],
            mlflow_artifacts_in_store=leaked["artifacts_in_store"],
        )
    if "kills" in only:
        killed = kills(n_kills, args.seed, budget_s=args.kill_budget * 60, stages=kill_stages)
        summary["kills"] = {k: v for k, v in killed.items() if k != "by_trial"}
        if killed.get("by_trial"):
            summary["kills_by_trial"] = [{k: v for k, v in t.items() if k != "rerun_output"} for t in killed["by_trial"]]

    seconds = time.perf_counter() - start
    print(f"total {seconds:.1f} s")
    summary["seconds"] = round(seconds, 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
