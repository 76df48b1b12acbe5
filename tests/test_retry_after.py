"""Retry-After: every retrying OpenAI client waits as a 429 asks before its next try, at most its own timeout.

Each client talks to a real local HTTP server that answers the first request
with 429 and a Retry-After, then a good reply. Each client's own first backoff
is far shorter than the delay asked for, so only the header explains the gap.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from test_format import make_query

from star.service import retry_after

KEY_ENV = "STAR_TEST_KEY"
ASKED_S = 1.0  # the delay the server asks for, in seconds
PLAN = {"days": 1, "current_city": "Brint", "transportation": "-", "breakfast": "-", "attraction": "-", "lunch": "-", "dinner": "-", "accommodation": "-"}


def reply(body: dict) -> str:
    content = json.dumps({"plan": [PLAN]}) if "response_format" in body else f"A {make_query().days}-day trip from Aldmoor to Brint (2022-03-10 to 2022-03-12), 1 of us, $1500 total."
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model", "m"), "choices": [choice]})


def rate_limit_once(header: Callable[[], dict[str, str]]) -> tuple[Callable, list[tuple[float, float]]]:
    """An answer for `reply_server`: 429 with `header()` to the first request, a good reply after. Records (monotonic, wall) times."""
    times: list[tuple[float, float]] = []

    def answer(body: dict) -> tuple[int, str, dict[str, str]] | tuple[int, str]:
        times.append((time.monotonic(), time.time()))
        if len(times) == 1:
            return 429, json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}), header()
        return 200, reply(body)

    return answer, times


def call_teacher(base_url: str, timeout: float) -> Any:
    from star.travel.planner.openai_teacher import OpenAITeacher
    from star.travel.specs import OpenAITeacherParams

    teacher = OpenAITeacher(OpenAITeacherParams(base_url=base_url, model="m", api_key_env=KEY_ENV, max_tokens=16, retries=1, timeout=timeout), backoff=0.05)
    return teacher.complete([{"role": "user", "content": "hi"}], [], seed=0).content


def call_formatter(base_url: str, timeout: float) -> Any:
    from star.travel.plans.format_llm import format_llm

    plan = format_llm("Day 1: Brint", None, base_url=base_url, model="m", api_key_env=KEY_ENV, timeout=timeout, retries=2, backoff=0.01)
    assert plan.delivered, plan.error
    return plan


def call_backend(base_url: str, timeout: float) -> Any:
    from star.agent.backend import Prompt
    from star.agent.openai_backend import OpenAIBackend

    backend = OpenAIBackend(base_url, "m", api_key_env=KEY_ENV, timeout=timeout, retries=1)
    return backend.generate([Prompt([1], [{"role": "user", "content": "hi"}])], 16)[0].text


def call_paraphraser(base_url: str, timeout: float) -> Any:
    from star.travel.specs import ParaphraseSpec
    from star.travel.world.paraphrase import paraphrase

    _, counts = paraphrase([make_query()], ParaphraseSpec(enabled=True, base_url=base_url, model="m", api_key_env=KEY_ENV, timeout=timeout, retries=1, concurrency=1))
    assert set(counts) <= {"paraphrased", "rejected"}, counts  # an answer came back, not an error
    return counts


CLIENTS = {"teacher": call_teacher, "formatter": call_formatter, "backend": call_backend, "paraphraser": call_paraphraser}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_429_with_retry_after_in_seconds_is_retried_after_that_delay(client, reply_server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    answer, times = rate_limit_once(lambda: {"Retry-After": f"{ASKED_S:g}"})
    assert CLIENTS[client](reply_server(answer), 10.0)
    assert len(times) == 2
    gap = times[1][0] - times[0][0]
    # Every client's own first backoff is 0.5 s or less: without the header it retries sooner.
    assert ASKED_S <= gap < ASKED_S + 2.0, gap


@pytest.mark.parametrize("client", CLIENTS)
def test_a_429_with_retry_after_as_an_http_date_is_retried_at_that_date(client, reply_server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    # HTTP dates have whole seconds: two seconds ahead of the 429 asks for a wait of more than one second.
    # The date is set when the first request arrives, so a slow start on a busy machine cannot shorten it.
    asked: list[int] = []

    def header() -> dict[str, str]:
        asked.append(math.floor(time.time()) + 2)
        return {"Retry-After": email.utils.formatdate(asked[0], usegmt=True)}

    answer, times = rate_limit_once(header)
    assert CLIENTS[client](reply_server(answer), 10.0)
    assert len(times) == 2
    assert times[1][1] >= asked[0], (times[1][1], asked[0])
    assert times[1][0] - times[0][0] >= 1.0


@pytest.mark.parametrize("client", CLIENTS)
def test_a_longer_retry_after_is_capped_at_the_clients_timeout(client, reply_server, monkeypatch, caplog):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    answer, times = rate_limit_once(lambda: {"Retry-After": "3600"})
    with caplog.at_level(logging.WARNING, logger="star.service"):
        assert CLIENTS[client](reply_server(answer), 1.0)
    gap = times[1][0] - times[0][0]
    assert 1.0 <= gap < 3.0, gap
    assert "asked to wait 3600.0s" in caplog.text and "client's timeout" in caplog.text


def test_retry_after_reads_seconds_dates_and_milliseconds():
    now = 1_700_000_000.0
    assert retry_after({"Retry-After": "3"}) == 3.0
    assert retry_after({"retry-after": " 1.5 "}) == 1.5
    assert retry_after({"Retry-After": email.utils.formatdate(now + 30, usegmt=True)}, now=now) == pytest.approx(30.0)
    assert retry_after({"Retry-After": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0.0  # past: no wait
    assert retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert retry_after({"Retry-After": "-4"}) == 0.0
    for value in ("soon", "", "inf", "nan", "Wed, 99 Foo 2015 07:28:00"):
        assert retry_after({"Retry-After": value}) is None, value
    assert retry_after({}) is None and retry_after(None) is None
