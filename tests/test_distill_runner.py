"""distill's episodes as Prefect tasks: the runner knob, resume after a kill, a Ray cluster, a Dask cluster;
and infer's and QA inference's, on the same Ray cluster.

The flows run in subprocesses against one Prefect server, as a stage would.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from star.config import ParamsError, parse_section

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
QUERIES, SIZE = 24, 4  # six chunks

# Runs distill as the stage does, each episode counted in COUNT and slowed by SLOW seconds.
DRIVER = """
import json, sys, time
from pathlib import Path
import flows.distill as d
import star.travel.planner.distill as episodes
from star.config import EnvParams, RunnerParams
from star.travel.specs import TeacherParams
from star.travel.domain import TravelDomain

args = json.loads(sys.argv[1])
real = episodes.run_episode

def counted(*a, **k):
    with open(args["count"], "a") as f:
        f.write("1\\n")
    time.sleep(args["slow"])
    return real(*a, **k)

episodes.run_episode = counted
runner, work = RunnerParams(**args["runner"]), Path(args["work"])
domain = TravelDomain({"teacher": TeacherParams(fault_rate=0.1), "env": EnvParams()}, work / "world")
store = work / "progress" / "distill"
if args["threads"]:
    flow = d.under(d._distill, runner, threads=args["threads"])
    flow(domain, work / "train.jsonl", Path(args["out"]), store, runner.episodes_per_task)
else:
    d.distill_flow(domain, runner, work / "train.jsonl", Path(args["out"]), store)
"""

# Runs infer as the stage does: a tiny model plays the queries, under the runner in argv.
INFER = """
import json, sys
from pathlib import Path
import torch
from flows.infer import infer_flow
from star.config import EnvParams, InferParams, ModelParams, RunnerParams
from star.travel.domain import TravelDomain

torch.set_num_threads(1)  # as a one-CPU Ray worker runs it
args = json.loads(sys.argv[1])
work, out = Path(args["work"]), Path(args["out"])
infer = InferParams(max_turns=3, max_new_tokens=24, max_total_tokens=1024, batch_size=4)
domain = TravelDomain({"env": EnvParams()}, work / "world")
infer_flow(infer, ModelParams(), RunnerParams(**args["runner"]), domain, "base", work / "train.jsonl", work / "tiny", out, out / "report", work / "progress" / "infer_base")
"""

# Runs QA inference as the stage does: the tiny model answers the questions, under the runner in argv;
# the first call builds a small QA corpus and its questions, as qa_world and qa_synthesize do.
QA_INFER = """
import json, sys
from pathlib import Path
import torch
from flows.infer import infer_flow
from star.config import InferParams, ModelParams, RunnerParams
from star.qa.specs import QAParams
from star.qa.domain import QADomain

torch.set_num_threads(1)
args = json.loads(sys.argv[1])
work = Path(args["work"])
params = QAParams.model_validate({"world": {"num_people": 40, "num_places": 10, "num_countries": 3, "num_orgs": 12}, "questions": {"sizes": {"train": 0, "validation": 0, "test": 12}}})
corpus, questions = work / "qa_corpus", work / "qa_questions"
domain = QADomain({"qa": params}, corpus)
if not corpus.exists():
    domain.build_world(corpus)
    domain.synthesize(questions)
infer = InferParams(max_turns=3, max_new_tokens=24, max_total_tokens=1024, batch_size=4)
out = Path(args["out"])
infer_flow(infer, ModelParams(), RunnerParams(**args["runner"]), domain, "qa_base", questions / "test.jsonl", work / "tiny", out, out / "report", work / "progress" / "qa_infer")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def work(tmp_path_factory, synthetic_sandbox) -> Path:
    from star.travel.specs import SynthesisSpec
    from star.travel.world.synthesize import Synthesizer

    work = tmp_path_factory.mktemp("distill")
    synthetic_sandbox.save(work / "world")
    spec = SynthesisSpec(seed=2, sizes={"train": QUERIES, "validation": 0, "test": 0}, days={3: 1.0, 5: 1.0, 7: 1.0})
    queries = Synthesizer(synthetic_sandbox, spec).run()["train"]
    (work / "train.jsonl").write_text("".join(json.dumps(q.model_dump()) + "\n" for q in queries))
    return work


@pytest.fixture(scope="module")
def expected(work) -> bytes:
    """The trajectories file of a plain loop over the episodes, as distill wrote it before its fan-out."""
    from star.config import EnvParams
    from star.io import read_jsonl
    from star.travel.planner.distill import make_teacher, run_episode
    from star.travel.specs import TeacherParams
    from star.travel.world.query import Query
    from star.travel.world.sandbox import Sandbox
    from star.travel.world.sandbox_index import index_for
    from star.travel.world.tools import TravelTools

    teacher, env, sandbox = TeacherParams(fault_rate=0.1), EnvParams(), Sandbox.load(work / "world")
    solver, tools, index = make_teacher(teacher), TravelTools(sandbox, row_cap=env.row_cap), index_for(sandbox)
    rows = [
        run_episode(solver, tools, index, Query.model_validate(r), 0, seed=0, max_turns=env.max_turns, fault_rate=0.1)
        for r in read_jsonl(work / "train.jsonl")
    ]
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    from flows.serve import prefect_server

    home = tmp_path_factory.mktemp("home")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_", "RAY_"))}
    # A HOME of its own: Ray reads ~/.ray (an auth token left by another cluster breaks this one).
    base.update(PATH=f"{BIN}:{os.environ['PATH']}", HOME=str(home), PREFECT_HOME=str(home / "prefect"), RAY_USAGE_STATS_ENABLED="0")
    with prefect_server(home / "prefect", base, prefect=str(BIN / "prefect")) as url:
        yield {**base, "PREFECT_API_URL": url, "PYTHONPATH": str(ROOT)}


def fingerprint(work: Path) -> str:
    from flows.distill import progress_fingerprint
    from star.config import EnvParams
    from star.travel.domain import TravelDomain
    from star.travel.specs import TeacherParams

    return progress_fingerprint(TravelDomain({"teacher": TeacherParams(fault_rate=0.1), "env": EnvParams()}, work / "world"), work / "train.jsonl")


def driver(env: dict, work: Path, name: str, runner: dict, threads: int = 0, slow: float = 0.0) -> tuple[subprocess.Popen, Path]:
    count = work / f"{name}.count"
    args = {"work": str(work), "out": str(work / name), "count": str(count), "slow": slow, "runner": runner, "threads": threads}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(args)], cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, count


def finish(proc: subprocess.Popen, timeout: float = 600) -> None:
    output, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, output[-3000:]


def episodes(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


@pytest.mark.parametrize(
    "runner, expect",
    [({"kind": "spark"}, ["runner.kind", "'spark'", "'threads', 'ray' or 'dask'"]), ({"address": "auto"}, ["runner", "address is for kind: ray or dask"]), ({"episodes_per_task": 0}, ["runner.episodes_per_task", "0"])],
)
def test_a_malformed_runner_is_a_clear_error(runner, expect):
    with pytest.raises(ParamsError) as info:
        parse_section("runner", runner)
    assert "\n" not in str(info.value) and all(part in str(info.value) for part in expect)


@pytest.mark.slow
def test_a_killed_distill_resumes_from_the_persisted_chunks(env, work, expected):
    runner = {"episodes_per_task": SIZE}
    # Four threads, each episode slowed: the kill lands with some chunks saved and others not.
    proc, count = driver(env, work, "resumed", runner, threads=4, slow=0.15)
    store = work / "progress" / "distill"
    deadline = time.monotonic() + 90
    while len(saved := [p for p in store.rglob("*") if p.is_file() and not p.name.startswith(".tmp-")]) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "distill ended before it could be killed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = [p for p in store.rglob("*") if p.is_file() and not p.name.startswith(".tmp-")]
    assert 2 <= len(saved) < QUERIES // SIZE and not (work / "resumed").exists()
    assert {p.parent.name for p in saved} == {fingerprint(work)}  # other params never find these

    count.unlink()
    rerun, count = driver(env, work, "resumed", runner, threads=4)
    finish(rerun)
    assert episodes(count) == QUERIES - SIZE * len(saved)  # finished chunks were read, not played again
    assert (work / "resumed" / "trajectories.jsonl").read_bytes() == expected
    assert not store.exists()  # the persisted chunks are dropped once the output is written

    # The same params without a kill, one thread and the knob's default chunking: the same bytes.
    whole, _ = driver(env, work, "whole", {})
    finish(whole)
    assert (work / "whole" / "trajectories.jsonl").read_bytes() == expected


def ray_node(env: dict, temp: Path, *args: str) -> subprocess.Popen:
    """A Ray node in the foreground (`--block`): terminating it stops every process it started.
    Without PYTHONPATH: the job ships the project's code to the workers itself."""
    cmd = [str(BIN / "ray"), "start", "--block", "--num-cpus", "1", "--temp-dir", str(temp), "--disable-usage-stats", *args]
    node_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=node_env, cwd=temp)


def ray_up(address: str, env: dict) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = subprocess.run([str(BIN / "ray"), "status", "--address", address], env=env, capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.count("node_") >= 2:
            return
        time.sleep(0.5)
    raise AssertionError(f"the Ray cluster at {address} did not come up with two nodes: {probe.stdout}{probe.stderr}")


def infer(env: dict, work: Path, name: str, runner: dict, script: str = INFER) -> bytes:
    out = work / name
    proc = subprocess.run([sys.executable, "-c", script, json.dumps({"work": str(work), "out": str(out), "runner": runner})], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return (out / "trajectories.jsonl").read_bytes()


@pytest.fixture(scope="module")
def tiny(work, expected, synthetic_sandbox) -> Path:
    """An untrained tiny policy whose vocabulary comes from the expert's episodes."""
    from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
    from star.travel.world.synthetic import entity_names

    rows = [json.loads(line) for line in expected.decode().splitlines()]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]))
    return make_tiny(work / "tiny", corpus, entity_names(synthetic_sandbox), TinySpec(vocab_size=600, hidden_size=64, num_layers=1, num_heads=2))


@pytest.mark.slow
def test_distill_and_infer_on_a_ray_cluster_write_the_same_bytes(env, work, expected, tiny):
    import shutil
    import tempfile

    # infer in the stage's process: its one task (the knob's default), then chunks of SIZE queries.
    whole = infer(env, work, "infer_whole", {})
    assert len(whole.splitlines()) == QUERIES
    assert infer(env, work, "infer_chunks", {"episodes_per_task": SIZE}) == whole
    qa_whole = infer(env, work, "qa_infer_whole", {}, QA_INFER)
    assert len(qa_whole.splitlines()) == 12

    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # Ray's socket paths must stay short
    port = free_port()
    address = f"127.0.0.1:{port}"
    head = ray_node(env, temp, "--head", "--port", str(port), "--ray-client-server-port", str(free_port()), "--include-dashboard", "false")
    nodes = [head]
    try:
        nodes.append(ray_node(env, temp, "--address", address))
        ray_up(address, env)
        proc, count = driver(env, work, "ray", {"kind": "ray", "address": address, "episodes_per_task": SIZE})
        finish(proc, timeout=600)
        assert (work / "ray" / "trajectories.jsonl").read_bytes() == expected
        # The model policy's chunks on the cluster's nodes: the same rows.
        assert infer(env, work, "infer_ray", {"kind": "ray", "address": address, "episodes_per_task": SIZE}) == whole
        assert infer(env, work, "qa_infer_ray", {"kind": "ray", "address": address, "episodes_per_task": SIZE}, QA_INFER) == qa_whole
    finally:
        for node in reversed(nodes):
            node.terminate()
        for node in reversed(nodes):
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.kill()
        shutil.rmtree(temp, ignore_errors=True)


def dask_process(env: dict, temp: Path, *args: str) -> subprocess.Popen:
    """`dask scheduler` or `dask worker` in the foreground: the processes it starts end with it."""
    return subprocess.Popen([str(BIN / "dask"), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=temp)


@pytest.mark.slow
def test_distill_on_a_dask_cluster_writes_the_same_bytes(env, work, expected, tmp_path):
    from distributed import Client

    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [dask_process(env, tmp_path, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")]
    try:
        # One worker process of two threads (each process spends seconds importing the project), which
        # imports star and flows from the checkout (PYTHONPATH).
        procs.append(dask_process(env, tmp_path, "worker", address, "--nworkers", "1", "--nthreads", "2", "--no-dashboard", "--local-directory", str(tmp_path)))
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=60)
            run, count = driver(env, work, "dask", {"kind": "dask", "address": address, "episodes_per_task": SIZE})
            finish(run, timeout=600)
            ran = client.run_on_scheduler(lambda dask_scheduler: dict(dask_scheduler.task_prefixes["play_chunk"].state_counts))
        assert (work / "dask" / "trajectories.jsonl").read_bytes() == expected
        assert episodes(count) == 0 and ran["memory"] == QUERIES // SIZE  # every chunk ran on the cluster, none in the stage's process
    finally:
        # Killed, the worker's nanny takes its process with it; closed, it would wait seconds for that process to exit.
        for proc in procs[1:]:
            proc.kill()
        procs[0].terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
