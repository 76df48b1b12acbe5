"""Shared tracking and artifacts with real components: the first stages run against a real
`mlflow server` (runs in its store, artifacts uploaded through it), then their outputs make a
round trip through a DVC remote into a fresh clone, where nothing needs to run again."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
STAGES = ("world", "synthesize")  # the cheapest stages: seconds on the micro profile
OUTS = ("data/world", "data/queries")
# params whose value is a mapping are set whole (as stages/profile.py passes them)
WHOLE = {"sizes", "levels", "days", "budget_factor"}


def merge(base: dict, profile: dict) -> dict:
    out = dict(base)
    for key, value in profile.items():
        if isinstance(value, dict) and key not in WHOLE and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(server: str, prefect_home: Path) -> dict[str, str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "PREFECT_HOME": str(prefect_home)}
    for var in ("DVC_EXP_NAME", "DVC_ROOT", "PREFECT_API_URL", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_RUN_ID"):
        env.pop(var, None)
    env["MLFLOW_TRACKING_URI"] = server
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def sh(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def files(root: Path) -> dict[str, bytes]:
    """{path under root: content} of every file in OUTS."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for out in OUTS for p in sorted((root / out).rglob("*")) if p.is_file()}


class Server:
    """A real `mlflow server` on a free local port: a sqlite store, artifacts served from `artifacts`."""

    def __init__(self, home: Path):
        self.home, self.artifacts, self.log = home, home / "artifacts", home / "server.log"
        port = free_port()
        self.uri = f"http://127.0.0.1:{port}"
        cmd = [
            str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{home / 'mlflow.db'}",
            "--artifacts-destination", str(self.artifacts), "--serve-artifacts",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"  # no background job runner
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        with self.log.open("w") as log:  # its own process group: the server's workers stop with it
            self.proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"mlflow server exited ({self.proc.returncode}):\n{self.log.read_text()[-4000:]}"
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, f"mlflow server did not answer:\n{self.log.read_text()[-4000:]}"
            time.sleep(0.5)

    def stop(self) -> None:
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
            try:
                os.killpg(self.proc.pid, sig)
                self.proc.wait(timeout=grace)
                return
            except ProcessLookupError:
                return
            except subprocess.TimeoutExpired:
                continue


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A started server (it is still coming up: `wait` for it), stopped at the end, pass or fail."""
    server = Server(tmp_path_factory.mktemp("mlflow-server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pipeline(server, tmp_path_factory):
    """A git + DVC repo of the project on the micro profile, whose first stages ran against the server."""
    base = tmp_path_factory.mktemp("shared")
    repo, env = base / "repo", environment(server.uri, base / "prefect")
    repo.mkdir()
    for name in ("dvc.yaml", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    for name in ("star", "stages", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    params = merge(yaml.safe_load((ROOT / "params.yaml").read_text()), yaml.safe_load((ROOT / "params.micro.yaml").read_text()))
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in ("git init -q", "git config user.email test@example.com", "git config user.name test", "dvc init -q",
                "dvc config core.analytics false", "git add -A", "git commit -qm init"):
        sh(cmd.split(), repo, env)
    server.wait()  # it came up while the repo was built
    # as `make repro` runs the pipeline: one Prefect server for the stages' flows
    out = sh([sys.executable, "-m", "flows.serve", "dvc", "repro", STAGES[-1]], repo, env)
    for stage in STAGES:
        assert f"Running stage '{stage}'" in out, out
    return repo, env, params


def test_stage_runs_and_their_artifacts_go_to_the_shared_server(server, pipeline):
    import mlflow

    uri, artifacts = server.uri, server.artifacts
    repo, _, params = pipeline
    # nothing tracked beside the repo: the server holds the runs and the artifacts
    for local in ("mlflow.db", "mlruns", "mlartifacts"):
        assert not (repo / local).exists(), local

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("star")
    assert experiment is not None
    assert experiment.artifact_location.startswith("mlflow-artifacts:")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("star.role") == "pipeline"]
    stages = {r.data.tags["star.stage"]: r for r in runs if r.data.tags.get("star.role") == "stage"}
    assert len(parents) == 1 and sorted(stages) == sorted(STAGES)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    for run in stages.values():
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.tags["star.git_commit"] == commit
    assert parents[0].data.metrics["pipeline_stage_s"] > 0

    world, synthesize = stages["world"].data, stages["synthesize"].data
    synthetic = params["world"]["synthetic"]
    assert world.params["world.synthetic.states"] == str(synthetic["states"])
    assert world.metrics["rows_cities"] == synthetic["states"] * synthetic["cities_per_state"]
    sizes = params["synthesize"]["sizes"]
    assert synthesize.params["synthesize.sizes.train"] == str(sizes["train"])
    for split in ("train", "validation", "test"):
        rows = (repo / f"data/queries/{split}.jsonl").read_text().splitlines()
        assert synthesize.metrics[f"queries_{split}"] == len(rows) == sizes[split], split

    # each stage's metrics file: uploaded through the server into its artifacts destination
    for stage, run in stages.items():
        name = f"{stage}_metrics.json"
        assert run.info.artifact_uri.startswith("mlflow-artifacts:")
        assert name in [a.path for a in client.list_artifacts(run.info.run_id)]
        stored = [p for p in artifacts.rglob(name) if run.info.run_id in p.parts]
        assert len(stored) == 1, sorted(artifacts.rglob("*"))
        assert json.loads(stored[0].read_text()) == pytest.approx(run.data.metrics)
        fetched = Path(client.download_artifacts(run.info.run_id, name, str(repo.parent)))
        assert fetched.read_bytes() == stored[0].read_bytes()


def test_outputs_round_trip_through_a_dvc_remote(server, pipeline, tmp_path):
    import mlflow

    uri = server.uri
    repo, env, _ = pipeline
    remote = tmp_path / "remote"
    sh(["dvc", "remote", "add", "-d", "store", str(remote)], repo, env)
    targets = list(STAGES)  # the pipeline's later stages never ran: nothing of theirs to push or pull
    sh(["dvc", "push", *targets], repo, env)
    assert any(p.is_file() for p in remote.rglob("*"))
    sh(["git", "add", "dvc.lock", ".dvc/config"], repo, env)
    sh(["git", "commit", "-qm", "lock and remote"], repo, env)

    clone = tmp_path / "clone"
    sh(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    assert not (clone / "data").exists()
    assert "store" in sh(["dvc", "remote", "list"], clone, env)  # the remote came with git
    sh(["dvc", "pull", *targets], clone, env)
    original = files(repo)
    assert original and files(clone) == original

    status = sh(["dvc", "status", "--with-deps", *targets], clone, env)
    assert "Data and pipelines are up to date" in status, status

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("star").experiment_id
    before = len(client.search_runs([experiment]))
    out = sh(["dvc", "repro", *targets], clone, env)
    assert "Running stage" not in out, out
    for stage in STAGES:
        assert f"Stage '{stage}' didn't change" in out, out
    assert files(clone) == original
    assert len(client.search_runs([experiment])) == before  # no stage run reached the server
