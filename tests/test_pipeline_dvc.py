"""End to end: `dvc repro world` in a fresh git repo runs it once and tracks it in MLflow."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def sh(cmd: list[str], cwd: Path, timeout: int = 1200) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("DVC_EXP_NAME", None)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("pipeline")
    for name in ("dvc.yaml", "params.yaml", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    for name in ("star", "stages", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    sh(["git", "init", "-q"], repo)
    sh(["git", "config", "user.email", "test@example.com"], repo)
    sh(["git", "config", "user.name", "test"], repo)
    sh(["dvc", "init", "-q"], repo)
    sh(["dvc", "config", "core.analytics", "false"], repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "commit", "-qm", "init"], repo)
    return repo


def stage_runs(repo: Path):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("star")
    return client.search_runs([experiment.experiment_id])


def test_repro_runs_world_then_skips_it(repo):
    first = sh(["dvc", "repro", "world"], repo)
    assert "Running stage 'world'" in first.stdout
    for table in ("flights", "distances", "accommodations", "restaurants", "attractions", "cities"):
        assert (repo / "data/world" / f"{table}.parquet").stat().st_size > 0
    assert (repo / "dvc.lock").exists()

    runs = stage_runs(repo)
    parents = [r for r in runs if r.data.tags.get("star.role") == "pipeline"]
    children = [r for r in runs if r.data.tags.get("star.role") == "stage"]
    assert len(parents) == 1 and len(children) == 1
    world = children[0]
    commit = sh(["git", "rev-parse", "HEAD"], repo).stdout.strip()
    assert world.data.tags["star.stage"] == "world"
    assert world.data.tags["star.git_commit"] == commit
    assert world.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
    assert len(world.data.tags["star.params_hash"]) == 12
    assert world.data.params["world.source"] == "synthetic"
    assert world.data.metrics["rows_cities"] == 16
    assert world.info.status == "FINISHED"

    second = sh(["dvc", "repro", "world"], repo)
    assert "Running stage 'world'" not in second.stdout
    assert "didn't change" in second.stdout
    assert len(stage_runs(repo)) == 2

    # a param of the stage changes: it runs again, under a new pipeline parent
    params = (repo / "params.yaml").read_text().replace("cities_per_state: 4", "cities_per_state: 3")
    (repo / "params.yaml").write_text(params)
    third = sh(["dvc", "repro", "world"], repo)
    assert "Running stage 'world'" in third.stdout
    runs = stage_runs(repo)
    assert sum(r.data.tags.get("star.role") == "pipeline" for r in runs) == 2
    latest = max((r for r in runs if r.data.tags.get("star.role") == "stage"), key=lambda r: r.info.start_time)
    assert latest.data.metrics["rows_cities"] == 12
