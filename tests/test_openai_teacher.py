"""OpenAITeacher against a real `transformers serve` of the built-in tiny model on CPU.

The tiny model is random, so its replies are noise: the tests check the
mechanics (requests, conversions, episode ends, errors, resume), not plans.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletionMessage

from star.env.parse import parse_action
from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
from star.travel.env import TravelEnv
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.planner.openai_teacher import (
    OpenAITeacher,
    TeacherRequestError,
    TeacherUnavailable,
    reply_text,
    to_api_messages,
)
from star.travel.specs import OpenAITeacherParams, SynthesisSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import entity_names
from star.travel.world.tools import TravelTools

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
KEY_ENV = "STAR_TEST_TEACHER_KEY"
SECRET = "sk-test-0123456789abcdef"
ROW_KEYS = {"query_id", "level", "days", "sample", "teacher", "messages", "tools", "turns", "tool_calls", "tool_errors", "truncated", "answer", "plan", "evaluation", "success", "calls"}


def eventually(check, timeout: float = 5.0) -> bool:
    """True once `check()` holds; the server's log reaches us a moment after its reply."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`transformers serve` of a local model directory, in a subprocess."""

    def __init__(self, model_dir: Path, startup_s: float = 120.0):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir)]
        cmd += ["--device", "cpu", "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self._wait_ready(startup_s)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def _wait_ready(self, startup_s: float) -> None:
        deadline = time.monotonic() + startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("transformers serve exited:\n" + "".join(self.lines[-30:]))
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("transformers serve did not start:\n" + "".join(self.lines[-30:]))

    def requests(self) -> int:
        """Chat requests answered so far (uvicorn's access log)."""
        return sum('"POST /v1/chat/completions' in line for line in self.lines)

    def received(self) -> int:
        """Chat requests that reached generation."""
        return sum("[Request received]" in line for line in self.lines)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="module")
def world(synthetic_sandbox):
    queries = Synthesizer(synthetic_sandbox, SynthesisSpec(sizes={"train": 3, "validation": 0, "test": 0})).run()["train"]
    return queries, TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, synthetic_sandbox) -> Path:
    schemas = TravelEnv(TravelTools(synthetic_sandbox)).tool_schemas()
    spec = TinySpec(vocab_size=300, hidden_size=64, num_heads=2, num_layers=2, max_position_embeddings=8192)
    out = tmp_path_factory.mktemp("tiny") / "model"
    return make_tiny(out, corpus_from_trajectories([], schemas, TravelEnv.system_prompt), entity_names(synthetic_sandbox), spec)


@pytest.fixture(scope="module")
def server(model_dir) -> Iterator[Server]:
    srv = Server(model_dir)
    try:
        yield srv
    finally:
        srv.stop()


def teacher_for(base_url: str, model_dir: Path, **kw) -> OpenAITeacher:
    fields = dict(base_url=base_url, model=str(model_dir), api_key_env=KEY_ENV, max_tokens=16, retries=1, timeout=30.0)
    return OpenAITeacher(OpenAITeacherParams(**{**fields, **kw}), backoff=0.05)


def episode(teacher, world, query, sample: int = 0) -> dict:
    _, tools, index = world
    return run_episode(teacher, tools, index, query, sample, seed=0, max_turns=3, fault_rate=0.0)


def key(row: dict) -> tuple:
    return (row["query_id"], row["sample"])


@pytest.fixture
def secret_key(monkeypatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


# --- conversions --------------------------------------------------------------


def test_history_becomes_api_messages_with_matching_tool_ids(world):
    queries, tools, index = world
    row = run_episode(ExpertTeacher(Expert()), tools, index, queries[0], 0, seed=0, max_turns=30, fault_rate=0.2)
    messages = to_api_messages(row["messages"])
    assert [m["role"] for m in messages] == [m["role"] for m in row["messages"]]
    answered: list[str] = []
    for m in messages:
        if m["role"] == "assistant" and "tool_calls" in m:
            assert "<tool_call>" not in m["content"] and m["content"].startswith("<think>")
            for call in m["tool_calls"]:
                json.loads(call["function"]["arguments"])
            answered = [c["id"] for c in m["tool_calls"]]
        elif m["role"] == "tool":
            assert set(m) == {"role", "tool_call_id", "content"}
            assert m["tool_call_id"] == answered.pop(0)
    ids = [c["id"] for m in messages for c in m.get("tool_calls", [])]
    assert len(ids) == len(set(ids)) == row["tool_calls"] > 0
    assert "<answer>" in messages[-1]["content"] and "tool_calls" not in messages[-1]


def message(content: str | None = None, tool_calls: list | None = None, **extra) -> ChatCompletionMessage:
    return ChatCompletionMessage.model_validate({"role": "assistant", "content": content, "tool_calls": tool_calls, **extra})


def function_call(name: str, arguments: str) -> dict:
    return {"id": "x", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    "msg, think, call, answer",
    [
        (message("", [function_call("SearchCity", '{"state": "Ohio"}')], reasoning_content=" look up <answer> "), "look up", ("SearchCity", {"state": "Ohio"}), None),
        (message("<think>a</think>b", [function_call("SearchCity", '{"state": "Ohio"}'), function_call("Other", "{}")]), "a\nb", ("SearchCity", {"state": "Ohio"}), None),
        (message('<think>t</think>\n<tool_call>{"name": "SearchCity", "arguments": {"state": "Ohio"}}</tool_call>'), "t", ("SearchCity", {"state": "Ohio"}), None),
        (message("<think>t</think>Day 1: from A to B"), "t", None, "Day 1: from A to B"),
        (message("intro <answer>Day 1: x</answer>", reasoning="r"), "r\nintro", None, "Day 1: x"),
        (message("<think>maybe <tool_call>no</tool_call></think>plan"), "maybe no", None, "plan"),
        (message(None), "", None, ""),
    ],
)
def test_reply_becomes_one_agent_turn(msg, think, call, answer):
    action = parse_action(reply_text(msg))
    assert action.error is None and action.think == think
    assert [(c.name, c.arguments) for c in action.tool_calls] == ([call] if call else [])
    assert action.answer == answer


def test_bad_replies_reach_the_environment_as_invalid_turns(world):
    queries, tools, _ = world
    env = TravelEnv(tools)
    env.reset(queries[0])
    env.step(reply_text(message("", [function_call("SearchCity", "{not json")])))
    env.step(reply_text(message("<think>t <answer></think><tool_call>{broken</tool_call>")))
    assert [c.kind for c in env.calls] == ["invalid", "invalid"] and not env.done


# --- a real server -------------------------------------------------------------


@pytest.mark.slow
def test_episodes_against_transformers_serve(server, model_dir, world, secret_key):
    queries = world[0]
    teacher = teacher_for(server.base_url, model_dir)
    assert teacher.name == f"openai:{model_dir}"
    before = server.requests()
    rows = [episode(teacher, world, q) for q in queries]
    for row in rows:
        assert set(row) == ROW_KEYS and row["teacher"] == teacher.name
        assert 1 <= row["turns"] <= 3 and (row["answer"] is not None or row["truncated"])
        assert any(m["role"] == "assistant" for m in row["messages"])
        for m in row["messages"]:
            if m["role"] == "assistant":
                assert m["content"].startswith("<think>")
    assert eventually(lambda: server.requests() - before == sum(r["turns"] for r in rows))
    assert SECRET not in "".join(server.lines)


@pytest.mark.slow
def test_server_accepts_a_multi_turn_history(server, model_dir, world):
    queries, tools, index = world
    row = run_episode(ExpertTeacher(Expert()), tools, index, queries[1], 0, seed=0, max_turns=30, fault_rate=0.0)
    teacher = teacher_for(server.base_url, model_dir)
    before = server.requests()
    reply = teacher.complete(to_api_messages(row["messages"][:-1]), json.loads(row["tools"]), seed=0)
    assert reply.role == "assistant" and row["tool_calls"] > 0
    assert eventually(lambda: server.requests() - before == 1)


@pytest.mark.slow
def test_client_errors_are_not_retried(server, model_dir, secret_key):
    teacher = teacher_for(server.base_url, "no-such-model", retries=3)
    before = server.requests()
    with pytest.raises(TeacherRequestError) as err:
        teacher.complete([{"role": "user", "content": "hi"}], [], seed=0)
    assert eventually(lambda: server.requests() - before == 1)
    assert "HTTP 400" in str(err.value) and server.base_url in str(err.value) and SECRET not in str(err.value)


def test_dead_server_raises_teacher_unavailable_quickly(model_dir, world, secret_key):
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    teacher = teacher_for(base_url, model_dir, retries=2, timeout=2.0)
    start = time.monotonic()
    with pytest.raises(TeacherUnavailable) as err:
        episode(teacher, world, world[0][0])
    text = str(err.value)
    assert time.monotonic() - start < 10
    assert base_url in text and "connection error" in text and "3 attempt(s)" in text
    assert SECRET not in text and err.value.__cause__ is None and "\n" not in text


# Runs the distill flow as the stage does (flows/distill.py), each episode it starts written to COUNT.
DRIVER = """
import json, sys
from pathlib import Path
import flows.distill as d
import star.travel.planner.distill as episodes
from star.config import EnvParams, RunnerParams
from star.travel.specs import TeacherParams
from star.travel.domain import TravelDomain

args = json.loads(sys.argv[1])
real = episodes.run_episode

def counted(solver, tools, index, query, sample, **kw):
    with open(args["count"], "a") as f:
        f.write(f"{query.idx} {sample}\\n")
    return real(solver, tools, index, query, sample, **kw)

episodes.run_episode = counted
work = Path(args["work"])
domain = TravelDomain({"teacher": TeacherParams.model_validate(args["teacher"]), "env": EnvParams(max_turns=3)}, work / "world")
d.distill_flow(domain, RunnerParams(), work / "train.jsonl", work / "out", work / "progress" / "distill")
"""


@pytest.fixture(scope="module")
def prefect_env(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The environment of a flow subprocess, with a Prefect server of its own."""
    from flows.serve import prefect_server

    home = tmp_path_factory.mktemp("prefect")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_"))}
    base.update(PATH=f"{BIN}:{os.environ['PATH']}", PREFECT_HOME=str(home))
    with prefect_server(home, base, prefect=str(BIN / "prefect")) as url:
        yield {**base, "PREFECT_API_URL": url, "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_server_dying_mid_run_keeps_finished_rows_and_resume_runs_only_the_rest(server, model_dir, world, synthetic_sandbox, prefect_env, tmp_path, secret_key):
    from flows.distill import progress_fingerprint
    from star.config import EnvParams
    from star.travel.domain import TravelDomain
    from star.travel.planner.distill import make_teacher
    from star.travel.specs import TeacherParams
    from star.travel.world.sandbox import Sandbox

    queries = world[0]
    synthetic_sandbox.save(tmp_path / "world")
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(q.model_dump()) + "\n" for q in queries))
    items = [(q.idx, 0) for q in queries]  # one episode per task, in this order
    # Greedy replies: the server answers a request the same however many it serves at once.
    openai = dict(model=str(model_dir), api_key_env=KEY_ENV, max_tokens=32, temperature=0.0, retries=1, timeout=30.0)
    teacher = {"kind": "openai", "openai": openai}
    store = tmp_path / "progress" / "distill"
    env = {**prefect_env, KEY_ENV: secret_key}

    def distill(base_url: str, concurrency: int, count: Path) -> subprocess.Popen:
        args = {"work": str(tmp_path), "count": str(count), "teacher": {**teacher, "openai": {**openai, "base_url": base_url, "concurrency": concurrency}}}
        return subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(args)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def persisted() -> list[Path]:
        """The finished tasks' results, one file per task under the fingerprint (a failed task's record lies beside)."""
        return [p for p in store.glob("*/*") if p.is_file() and not p.name.startswith(".tmp-")]

    dying = Server(model_dir)
    try:
        proc = distill(dying.base_url, 1, tmp_path / "dying.count")

        # Kill the server once the first task's result is saved, while the next one talks to it.
        def killer() -> None:
            while not persisted() and proc.poll() is None:
                time.sleep(0.01)
            dying.kill()

        threading.Thread(target=killer, daemon=True).start()
        output, _ = proc.communicate(timeout=600)
    finally:
        dying.stop()
    assert proc.returncode != 0 and "TeacherUnavailable" in output and dying.base_url in output, output[-3000:]
    assert SECRET not in output and not (tmp_path / "out").exists()

    saved = persisted()
    assert 1 <= len(saved) < len(items)
    domain = TravelDomain({"teacher": TeacherParams.model_validate(teacher), "env": EnvParams(max_turns=3)}, tmp_path / "world")
    fingerprint = progress_fingerprint(domain, tmp_path / "train.jsonl")
    assert {p.parent.name for p in saved} == {fingerprint}
    finished = {items[int(p.name.split("-")[0])] for p in saved}

    # The rerun asks another server (the address is not part of the progress), two episodes at once.
    count = tmp_path / "resumed.count"
    before = server.requests()
    proc = distill(server.base_url, 2, count)
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, output[-3000:]
    assert SECRET not in output

    ran = [tuple(map(int, line.split())) for line in count.read_text().splitlines()]
    assert len(ran) == len(set(ran)) == len(items) - len(finished)  # finished tasks were read, not played again
    assert set(ran).isdisjoint(finished) and set(ran) | finished == set(items)
    rows = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    assert [key(r) for r in rows] == items  # every episode once, in order
    assert eventually(lambda: server.requests() - before == sum(r["turns"] for r in rows if key(r) not in finished))
    assert not store.exists()  # dropped once the output is written

    # The same rows as an uninterrupted run: a plain loop over the episodes against the live server.
    params = TeacherParams.model_validate({**teacher, "openai": {**openai, "base_url": server.base_url}})
    sandbox = Sandbox.load(tmp_path / "world")
    solver, tools, index = make_teacher(params), TravelTools(sandbox, row_cap=EnvParams().row_cap), index_for(sandbox)
    by_idx = {q.idx: q for q in queries}
    expected = [run_episode(solver, tools, index, by_idx[i], s, seed=0, max_turns=3, fault_rate=0.0) for i, s in items]
    assert (tmp_path / "out" / "trajectories.jsonl").read_text() == "".join(json.dumps(r, sort_keys=True) + "\n" for r in expected)


def test_a_reply_that_is_not_json_is_a_clear_error(model_dir, secret_key, fixed_reply_server):
    base_url = fixed_reply_server(200, "{not json")
    teacher = teacher_for(base_url, model_dir, retries=0, timeout=2.0)
    with pytest.raises(TeacherUnavailable, match="not JSON") as err:
        teacher.complete([{"role": "user", "content": "hi"}], [], seed=0)
    assert base_url in str(err.value) and SECRET not in str(err.value)
