"""Rewards for a QA episode: outcome, format and Agent-R1 process terms.

    outcome   EM or F1 of the answer against the gold answer and its aliases
              (`outcome`), 0 when the format fails
    format    1 if the episode ended with a non-empty <answer>, else 0
    process   mean over the episode's calls of a value per call, clipped to [-1, 1]:
                informative search   +informative  a Search whose results show a
                                                   supporting passage no earlier call
                                                   showed (a question without
                                                   supporting passages: any passage
                                                   not shown before)
                other valid search   +uninformative
                repeated call        +repeated     same tool, same arguments
                invalid call         +invalid      unparsable turn, bad arguments,
                                                   unknown tool
                failed call          +failed       tool error or injected fault

    reward = outcome + format_weight * format + process_weight * process

so `process_weight: 0` and `format_weight: 0` leave the outcome reward alone.
"""

from __future__ import annotations

from star.qa.data import Question
from star.qa.env import QAEnv
from star.qa.evaluate import score_answer
from star.qa.specs import QARewardParams
from star.train.process import call_breakdown

_INVALID = ("invalid", "unknown_tool")
_FAILED = ("error", "fault")


def call_verdicts(question: Question, env: QAEnv) -> list[str]:
    """One of informative, uninformative, repeated, invalid, failed per call of the episode."""
    tools = env.qa_tools
    wanted = {tools.render(tools.index.by_id[pid]) for pid in question.supporting if pid in tools.index.by_id}
    shown: set[str] = set()
    verdicts = []
    for call in env.calls:
        if call.kind == "repeated":
            verdicts.append("repeated")
        elif call.kind in _INVALID:
            verdicts.append("invalid")
        elif call.kind in _FAILED:
            verdicts.append("failed")
        else:
            lines = set(call.content.splitlines()) if call.kind == "ok" else set()
            new = lines - shown
            useful = new & wanted if wanted else new
            verdicts.append("informative" if useful else "uninformative")
            shown |= lines
    return verdicts


def process_score(verdicts: list[str], params: QARewardParams) -> float:
    if not verdicts:
        return 0.0
    mean = sum(getattr(params, v) for v in verdicts) / len(verdicts)
    return max(-1.0, min(1.0, mean))


def score_episode(question: Question, env: QAEnv, params: QARewardParams) -> dict[str, float]:
    formatted = env.answer is not None and bool(env.answer.strip())
    scores = score_answer(question, env.answer) if formatted else {"em": 0.0, "f1": 0.0}  # aliases count, as in evaluation
    em, f1 = scores["em"], scores["f1"]
    outcome = em if params.outcome == "em" else f1
    process = process_score(call_verdicts(question, env), params)
    return {
        "reward": outcome + params.format_weight * float(formatted) + params.process_weight * process,
        "outcome": outcome,
        "em": em,
        "f1": f1,
        "format": float(formatted),
        "process": process,
        "success": em,
        "turns": float(env.turns),
        **call_breakdown([c.kind for c in env.calls]),
    }
