"""A fresh git + DVC repo holding the project, for the tests that run the pipeline for real."""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def imports_dir(repo: Path) -> Path:
    """Where each stage run records the project files it imported (stages/common.py)."""
    return repo.with_name(f"{repo.name}-imports")


def sh(cmd: str, cwd: Path, timeout: int = 3600) -> str:
    # `timeout` guards against a hang only: a loaded machine runs the micro DAG in twice its quiet 19 minutes.
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "PREFECT_HOME": str(cwd / ".prefect")}
    env["STAR_RECORD_IMPORTS"] = str(imports_dir(cwd))
    for var in ("MLFLOW_TRACKING_URI", "DVC_EXP_NAME", "PREFECT_API_URL"):
        env.pop(var, None)
    proc = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def new_repo(repo: Path, profiles: tuple[str, ...]) -> Path:
    """The pipeline, its params and the given profiles, committed in a new git repo with DVC set up."""
    for name in ("dvc.yaml", "params.yaml", ".gitignore", *profiles):
        shutil.copy(ROOT / name, repo / name)
    for name in ("star", "stages", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    for cmd in ("git init -q", "git config user.email t@example.com", "git config user.name t", "dvc init -q", "dvc config core.analytics false", "git add -A", "git commit -qm init"):
        sh(cmd, repo)
    return repo


def exp_run(repo: Path, profiles: tuple[str, ...], extra: str = "") -> str:
    """`dvc exp run` with the profiles' flags, as the Makefile passes them: split on spaces, each one argument."""
    flags = shlex.join(sh(f"{sys.executable} -m stages.profile {' '.join(profiles)}", repo).split())
    return sh(f"{sys.executable} -m flows.serve dvc exp run {flags} {extra}", repo)


def mlflow_runs(repo: Path) -> list:
    """Every run in the repo's MLflow store (the pipeline's parent run and one per stage)."""
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    return client.search_runs([client.get_experiment_by_name("star").experiment_id], max_results=1000)
