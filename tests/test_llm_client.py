"""star.llm_client: every OpenAI-compatible caller retries exactly `retries` times, then fails clearly.

Each caller (teacher, llm formatter, OpenAI backend, paraphraser) talks to a
real local HTTP server that answers from a script of statuses (429, 500, 503,
then maybe 200). Failures carry `Retry-After: 0`, so no test waits on backoff.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from test_format import make_query
from test_retry_after import reply

from star.llm_client import make_client
from star.service import ServiceError

KEY_ENV = "STAR_TEST_LLM_KEY"
SECRET = "sk-test-llm-0123456789"
ERROR = json.dumps({"error": {"message": f"failed for key {SECRET}", "type": "server_error"}})  # echoes the key, as some servers do


class ScriptedServer:
    """Answers the n-th POST with `statuses[n]` (the last one repeats); 200 is a good chat completion."""

    def __init__(self, statuses: list[int]):
        self.statuses = statuses
        self.auth: list[str | None] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with lock:
                    outer.auth.append(self.headers.get("Authorization"))
                    status = outer.statuses[min(len(outer.auth), len(outer.statuses)) - 1]
                data = (reply(body) if status == 200 else ERROR).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status != 200:
                    self.send_header("Retry-After", "0")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def requests(self) -> int:
        return len(self.auth)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted(monkeypatch) -> Iterator[Callable[[list[int]], ScriptedServer]]:
    monkeypatch.setenv(KEY_ENV, SECRET)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    servers: list[ScriptedServer] = []

    def start(statuses: list[int]) -> ScriptedServer:
        servers.append(ScriptedServer(statuses))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


# Each caller: call it with `retries`; None when it succeeded, else its error message.


def teacher(base_url: str, retries: int) -> str | None:
    from star.travel.planner.openai_teacher import OpenAITeacher
    from star.travel.specs import OpenAITeacherParams

    params = OpenAITeacherParams(base_url=base_url, model="m", api_key_env=KEY_ENV, max_tokens=16, retries=retries, timeout=5.0)
    try:
        OpenAITeacher(params).complete([{"role": "user", "content": "hi"}], [], seed=0)
    except ServiceError as exc:
        return str(exc)
    return None


def formatter(base_url: str, retries: int) -> str | None:
    from star.travel.plans.format_llm import format_llm

    plan = format_llm("Day 1: Brint", None, base_url=base_url, model="m", api_key_env=KEY_ENV, timeout=5.0, retries=retries)
    assert plan.delivered == (plan.error is None)
    return plan.error  # the formatter never raises: its failure is the plan's error


def backend(base_url: str, retries: int) -> str | None:
    from star.agent.backend import Prompt
    from star.agent.openai_backend import OpenAIBackend

    try:
        OpenAIBackend(base_url, "m", api_key_env=KEY_ENV, timeout=5.0, retries=retries).generate([Prompt([1], [{"role": "user", "content": "hi"}])], 16)
    except ServiceError as exc:
        return str(exc)
    return None


def paraphraser(base_url: str, retries: int) -> str | None:
    from star.travel.specs import ParaphraseSpec
    from star.travel.world.paraphrase import paraphrase

    spec = ParaphraseSpec(enabled=True, base_url=base_url, model="m", api_key_env=KEY_ENV, timeout=5.0, retries=retries, concurrency=1)
    try:
        _, counts = paraphrase([make_query()], spec)
    except ServiceError as exc:
        return str(exc)
    # A refused request leaves its query as composed, counted as an error.
    return None if set(counts) <= {"paraphrased", "rejected"} else str(dict(counts))


CALLERS = {"teacher": teacher, "formatter": formatter, "backend": backend, "paraphraser": paraphraser}


@pytest.mark.parametrize("retries", [0, 2])
@pytest.mark.parametrize("caller", CALLERS)
def test_a_failing_server_gets_exactly_retries_more_tries_then_a_clear_error(caller, retries, scripted, caplog):
    server = scripted([429, 500, 503])
    with caplog.at_level(logging.WARNING):
        message = CALLERS[caller](server.base_url, retries)
    assert server.requests == retries + 1
    assert message is not None and f"{retries + 1} attempt" in message
    assert caller == "formatter" or server.base_url in message  # a plan's error names no server
    assert "\n" not in message and SECRET not in message and SECRET not in caplog.text
    assert caplog.text.count("retry ") == retries


@pytest.mark.parametrize("caller", CALLERS)
def test_failures_within_the_retries_end_in_a_reply(caller, scripted):
    server = scripted([429, 500, 200])
    assert CALLERS[caller](server.base_url, 2) is None
    assert server.requests == 3


@pytest.mark.parametrize("caller", CALLERS)
def test_a_refused_request_is_not_retried(caller, scripted):
    server = scripted([400])
    message = CALLERS[caller](server.base_url, 3)
    assert server.requests == 1
    assert message is not None and "\n" not in message and SECRET not in message


def test_the_client_sends_the_key_from_the_environment_and_never_retries_by_itself(scripted, monkeypatch):
    import openai

    server = scripted([500])
    client = make_client(server.base_url, KEY_ENV, 90.0)
    assert client.max_retries == 0 and client.timeout.read == 90.0 and client.timeout.connect == 10.0
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert server.auth == [f"Bearer {SECRET}"]
    monkeypatch.delenv(KEY_ENV)
    assert make_client(server.base_url, KEY_ENV, 5.0).api_key == "EMPTY"  # local servers take any key
