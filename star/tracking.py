"""MLflow conventions, in one place.

One pipeline run (one `dvc repro` or `dvc exp run`) is one parent run; each
stage run is a child of it. The parent is found by its `star.pipeline` tag:
the DVC experiment name when there is one, else the git commit plus a hash
of params.yaml.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

EXPERIMENT = "star"


def tracking_uri(root: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(root / 'mlflow.db').resolve()}"


def git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.exists() else "none"


def flatten(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


@contextmanager
def stage_run(stage: str, params: dict[str, Any], root: Path, params_file: str = "params.yaml") -> Iterator[Any]:
    """Open the MLflow run of one stage, under its pipeline's parent run."""
    import mlflow  # slow to import; only stages need it

    uri = tracking_uri(root)
    commit = git_commit(root)
    phash = file_hash(root / params_file)
    pipeline = os.environ.get("DVC_EXP_NAME") or f"{commit[:12]}-{phash}"
    tags = {
        "star.stage": stage,
        "star.pipeline": pipeline,
        "star.git_commit": commit,
        "star.params_hash": phash,
    }
    for var in ("DVC_EXP_NAME", "DVC_EXP_BASELINE_REV", "DVC_STAGE"):
        if os.environ.get(var):
            tags[f"dvc.{var[4:].lower()}"] = os.environ[var]

    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    # Creating the store or the parent run twice at once would corrupt or duplicate it.
    with FileLock(str(root / ".mlflow.lock")):
        experiment = client.get_experiment_by_name(EXPERIMENT)
        if experiment is None:
            location = None if os.environ.get("MLFLOW_TRACKING_URI") else (root / "mlartifacts").resolve().as_uri()
            experiment_id = client.create_experiment(EXPERIMENT, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
        found = client.search_runs(
            [experiment_id], filter_string=f"tags.`star.pipeline` = '{pipeline}' and tags.`star.role` = 'pipeline'"
        )
        if found:
            parent_id = found[0].info.run_id
        else:
            parent = client.create_run(
                experiment_id,
                run_name=f"pipeline {pipeline}",
                tags={**{k: v for k, v in tags.items() if k not in ("star.stage", "dvc.stage")}, "star.role": "pipeline"},
            )
            parent_id = parent.info.run_id
            client.set_terminated(parent_id)

    with mlflow.start_run(
        experiment_id=experiment_id, run_name=stage, parent_run_id=parent_id, tags={**tags, "star.role": "stage"}
    ) as run:
        flat = {k: ("" if v is None else v) for k, v in flatten(params).items()}
        mlflow.log_params({k: str(v)[:500] for k, v in flat.items()})
        yield run
