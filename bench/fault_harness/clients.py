"""The project's three OpenAI clients (teacher, llm formatter, backend), each as a call to make against a server,
and how a call's failure is judged: the project's own error, or a raw exception."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.fault_harness.corpus import Corpus
from star.service import ServiceError
from star.travel.planner.distill import run_episode
from star.travel.plans.format import format_itinerary
from star.travel.plans.plan import Plan

SERVER_KEY_ENV = "STAR_FAULTS_BENCH_KEY"  # a dummy key for the server section


def teacher_client(base_url: str, corpus: Corpus, timeout: float, retries: int, key_env: str = SERVER_KEY_ENV, model: str = "m") -> Callable[[], Any]:
    from star.travel.planner.openai_teacher import OpenAITeacher
    from star.travel.specs import OpenAITeacherParams

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
