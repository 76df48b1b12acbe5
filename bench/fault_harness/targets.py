"""What the fuzzer feeds: name -> (make an input, run the target on it) for the parser, both envs, the formatter,
the evaluator and the reward functions."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from bench.fault_harness.corpus import Corpus
from bench.fault_harness.mutations import mutate, mutate_submission, random_value
from star.env.core import arguments_json
from star.env.parse import Action, parse_action
from star.qa.env import QAEnv
from star.qa.expert import trajectory_row as qa_trajectory_row
from star.qa.rewards import Scorer as QAScorer
from star.qa.specs import QARewardParams
from star.train.process import KIND_GROUPS, call_breakdown, call_kinds, process_reward, verdicts
from star.travel.env import TravelEnv
from star.travel.evaluation.evaluate import MODES, evaluate_plan
from star.travel.planner.distill import trajectory_row
from star.travel.plans.format import format_itinerary, format_rules
from star.travel.plans.plan import Day, Plan, plan_from_submission
from star.travel.rewards import Scorer
from star.travel.specs import TravelRewardParams

EPS = 1e-9  # rounding allowed when checking a reward's range


def rubric_holds(scores: dict[str, float], weights: dict[str, float]) -> bool:
    """Each weighted function in its range (process in [-1, 1], the rest in [0, 1]), and "reward" their weighted sum."""
    ranges = all(-1.0 - EPS <= scores[n] <= 1.0 + EPS if n == "process" else 0.0 <= scores[n] <= 1.0 for n, w in weights.items() if w)
    total = sum(w * scores[n] for n, w in weights.items() if w)
    return ranges and abs(scores["reward"] - total) <= EPS and all(math.isfinite(v) for v in scores.values())


def fuzz_targets(c: Corpus) -> dict[str, tuple[Callable, Callable]]:
    """name -> (make, run) for every target."""
    travel_pool = c.travel_calls + [a for _, a in c.travel_answers]
    qa_pool = c.qa_calls + [a for _, a in c.qa_answers]
    everything = travel_pool + qa_pool
    travel_env = TravelEnv(c.tools, max_turns=6, fault_rate=0.1, seed=0)
    qa_env = QAEnv(c.qa_tools, max_turns=6, fault_rate=0.1, seed=0)
    outcomes = ("sum", "complete_sum", "macro", "success", "curriculum")
    travel_scorers = {kind: Scorer(c.index, TravelRewardParams(weights={kind: 1.0, "process": 0.1}), 10) for kind in outcomes}
    qa_params = [QARewardParams(weights={o: 1.0, "format": 0.1, "process": 0.1}) for o in ("em", "f1")]
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
        return query, texts, rng.choice(outcomes), rng.randint(0, 12)

    def run_travel_reward(item):
        query, texts, kind, step = item
        play(travel_env, query, texts)
        scores = travel_scorers[kind](query, travel_env, step)
        return rubric_holds(scores, {kind: 1.0, "process": 0.1})

    def make_qa_reward(rng):
        question, texts = make_qa(rng)
        return question, texts, rng.randrange(2)

    def run_qa_reward(item):
        question, texts, which = item
        play(qa_env, question, texts)
        params = qa_params[which]
        scores = QAScorer(params)(question, qa_env, 0)
        return rubric_holds(scores, params.weights)

    # process rewards: any kinds, any finite values
    def make_process(rng):
        kinds = [rng.choice(known_kinds) if rng.random() < 0.9 else mutate(rng, rng.choice(known_kinds) or "ok", everything, steps=1) for _ in range(rng.randint(0, 30))]
        values = TravelRewardParams(**{k: rng.uniform(-3, 3) for k in ("informative", "repeated", "invalid", "failed")})
        rows = [arguments_json({"name": rng.choice(["Search", "SearchCity", ""]), "arguments": random_value(rng), "kind": k}) for k in kinds]
        return kinds, values, rows

    def run_process(item):
        kinds, values, rows = item
        score = process_reward(verdicts(kinds), values)
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
