"""MLflow conventions, in one place.

One pipeline run (one `dvc repro` or `dvc exp run`) is one parent run; each
stage run is a child of it. The parent is found by its `star.pipeline` tag:
the DVC experiment name when there is one, else the git commit plus a hash
of params.yaml.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

EXPERIMENT = "star"


def store_root(root: Path) -> Path:
    """Where the MLflow store and its lock live: the repository, even when DVC runs
    a queued experiment in a temporary copy of it (DVC_ROOT names the repository)."""
    return Path(os.environ.get("DVC_ROOT") or root)


def tracking_uri(root: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(store_root(root) / 'mlflow.db').resolve()}"


def artifact_location(root: Path) -> str | None:
    """Our own store keeps its artifacts beside it, in `mlartifacts`; a store the user names keeps its own."""
    return None if os.environ.get("MLFLOW_TRACKING_URI") else (store_root(root) / "mlartifacts").resolve().as_uri()


def git_commit(root: Path) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.exists() else "none"


def flatten(params: dict[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}{sep}", sep))
        else:
            flat[name] = value
    return flat


def _pipeline_tags(root: Path, params_file: str) -> dict[str, str]:
    """Tags shared by a pipeline run and its stage runs; `star.pipeline` identifies the parent."""
    commit = git_commit(root)
    phash = file_hash(root / params_file)
    pipeline = os.environ.get("DVC_EXP_NAME") or f"{commit[:12]}-{phash}"
    tags = {
        "star.pipeline": pipeline,
        "star.git_commit": commit,
        "star.params_hash": phash,
    }
    for var in ("DVC_EXP_NAME", "DVC_EXP_BASELINE_REV", "DVC_STAGE"):
        if os.environ.get(var):
            tags[f"dvc.{var[4:].lower()}"] = os.environ[var]
    return tags


def _parent_run(root: Path, uri: str, tags: dict[str, str], artifacts: str | None = None) -> tuple[Any, str, str]:
    """(client, experiment id, parent run id) of the pipeline named by `tags`, created if absent.

    A new experiment keeps its artifacts at `artifacts` (None: MLflow's default).

    Everything that may create something (the store's tables, the experiment, the
    parent run) happens under one file lock: two stages or two `dvc exp run`
    starting at once would otherwise corrupt or duplicate it.
    """
    import mlflow  # slow to import; only stages need it

    with FileLock(str(store_root(root) / ".mlflow.lock")):
        # A client opens (and, the first time, creates) the store.
        client = mlflow.MlflowClient(uri)
        experiment = client.get_experiment_by_name(EXPERIMENT)
        if experiment is None:
            experiment_id = client.create_experiment(EXPERIMENT, artifact_location=artifacts)
        else:
            experiment_id = experiment.experiment_id
        pipeline = tags["star.pipeline"]
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
    return client, experiment_id, parent_id


def _process_alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _close_stale_runs(client: Any, experiment_id: str, pipeline: str) -> None:
    """Mark KILLED the stage runs left RUNNING by a killed stage.

    Such a run is never closed otherwise: DVC's run cache may later satisfy its
    stage. Two kinds are stale: any RUNNING stage run of this pipeline (DVC runs
    one stage of a pipeline at a time), and, whatever its pipeline, one started
    on this host by a process that is gone (another pipeline's live run, say a
    queued experiment running beside this one, is left alone).
    """
    running = client.search_runs(
        [experiment_id], filter_string="tags.`star.role` = 'stage' and attributes.status = 'RUNNING'"
    )
    host = socket.gethostname()
    for run in running:
        tags = run.data.tags
        mine = tags.get("star.pipeline") == pipeline
        dead = tags.get("star.host") == host and not _process_alive(tags.get("star.pid", ""))
        if mine or dead:
            client.set_terminated(run.info.run_id, status="KILLED")


def param_values(params: dict[str, Any]) -> dict[str, str]:
    """`params` flattened, as the strings MLflow stores (None as '', at most 500 characters)."""
    return {k: str("" if v is None else v)[:500] for k, v in flatten(params).items()}


@contextmanager
def stage_run(stage: str, params: dict[str, Any], root: Path, params_file: str = "params.yaml") -> Iterator[Any]:
    """Open the MLflow run of one stage, under its pipeline's parent run."""
    import mlflow  # slow to import; only stages need it

    uri, artifacts = tracking_uri(root), artifact_location(root)  # before set_tracking_uri, which MLflow copies into the environment
    tags = {"star.stage": stage, **_pipeline_tags(root, params_file)}
    mlflow.set_tracking_uri(uri)
    client, experiment_id, parent_id = _parent_run(root, uri, tags, artifacts)
    _close_stale_runs(client, experiment_id, tags["star.pipeline"])

    with mlflow.start_run(
        experiment_id=experiment_id,
        run_name=stage,
        parent_run_id=parent_id,
        tags={**tags, "star.role": "stage", "star.host": socket.gethostname(), "star.pid": str(os.getpid())},
    ) as run:
        mlflow.log_params(param_values(params))
        try:
            yield run
        finally:
            mlflow.end_run(status="FINISHED" if sys.exc_info()[0] is None else "FAILED")
            _extend_parent(root, client, parent_id, run.info.run_id)


def log_datasets(datasets: dict[str, tuple[Path, str]]) -> list[str]:
    """Log the files a run reads as its MLflow dataset inputs: {name: (path, context)}.

    Each dataset has the path as its source, the file's content hash as its digest (the
    same content shows the same digest in every run), the context (`training`,
    `evaluation`) and the file's JSON lines as its rows. A missing file is skipped; one
    whose lines are not JSON objects is logged without rows. Returns the names logged.
    """
    import json
    import warnings

    import mlflow
    import mlflow.data
    import pandas as pd

    logged, contexts, names = [], [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLflow's notes on a local path's two source types and on integer columns
        for name, (path, context) in datasets.items():
            path = Path(path)
            if not path.is_file():
                continue
            data = path.read_bytes()
            try:
                rows = pd.DataFrame([json.loads(line) for line in data.decode().splitlines() if line.strip()])
            except (ValueError, TypeError):
                rows = pd.DataFrame()
            digest = hashlib.sha256(data).hexdigest()[:12]  # as file_hash
            logged.append(mlflow.data.from_pandas(rows, source=str(path), name=name, digest=digest))
            contexts.append(context)
            names.append(name)
        if logged:
            mlflow.log_inputs(logged, contexts=contexts, tags_list=[None] * len(logged))
    return names


def _extend_parent(root: Path, client: Any, parent_id: str, stage_run_id: str) -> None:
    """Make the pipeline's parent run end with its latest stage, and add the stage's time to it.

    The parent then shows the pipeline's span in the UI (`pipeline_wall_s`, from its
    first stage's start), and `pipeline_stage_s` sums the time of every stage run in it.
    """
    import time

    now = int(time.time() * 1000)
    stage = client.get_run(stage_run_id).info
    stage_s = ((stage.end_time or now) - stage.start_time) / 1000
    with FileLock(str(store_root(root) / ".mlflow.lock")):
        parent = client.get_run(parent_id)
        client.set_terminated(parent_id, status="FINISHED", end_time=now)
        client.log_metric(parent_id, "pipeline_wall_s", (now - parent.info.start_time) / 1000, timestamp=now)
        client.log_metric(parent_id, "pipeline_stage_s", parent.data.metrics.get("pipeline_stage_s", 0.0) + stage_s, timestamp=now)


CONFLICT_TAG = "star.param_conflict."


def _flat_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    # bools are ints: logged as 0/1
    return {k: float(v) for k, v in flatten(metrics, sep="/").items() if isinstance(v, (int, float))}


def log_pipeline_summary(
    root: Path, params: dict[str, Any], metrics: dict[str, Any], params_file: str = "params.yaml"
) -> dict[str, Any]:
    """Put the params that define a pipeline run and its final metrics on its parent run.

    The parent is the one `stage_run` would use now (same `star.pipeline` tag, same
    lock; created if absent), so the MLflow compare view shows each pipeline run
    without opening its children.

    - `params` (nested, e.g. the whole params.yaml) are flattened as in `stage_run`
      (`grpo.reward`, `env.fault_rate`). MLflow params are immutable, so a param is
      logged only when absent; one already there with the same value is left alone;
      one there with another value keeps its first value, and the new value is
      recorded in the tag `star.param_conflict.<name>` (tags can change) and
      returned under `conflicts`. Calling again is therefore always safe.
    - `metrics` (nested dicts become `/` paths, e.g. {"grpo": {"final_pass_rate": x}}
      -> `grpo/final_pass_rate`, the convention `star.report` reads) are logged at
      step 0; a later call logs a newer value, which MLflow shows as the latest.
      Non-numeric values are skipped.

    Returns {"run_id", "logged" (new params), "conflicts" ({name: (kept, new)}), "metrics" (logged)}.
    """
    import time

    from mlflow.entities import Metric, Param, RunTag

    uri = tracking_uri(root)
    tags = _pipeline_tags(root, params_file)
    client, _, parent_id = _parent_run(root, uri, tags, artifact_location(root))
    wanted = param_values(params)
    flat_metrics = _flat_metrics(metrics)
    # The lock makes read-then-log atomic against another summary of the same parent.
    with FileLock(str(store_root(root) / ".mlflow.lock")):
        existing = client.get_run(parent_id).data.params
        new = {k: v for k, v in wanted.items() if k not in existing}
        conflicts = {k: (existing[k], v) for k, v in wanted.items() if k in existing and existing[k] != v}
        params_list = [Param(k, v) for k, v in new.items()]
        tag_list = [RunTag(f"{CONFLICT_TAG}{k}", v) for k, (_, v) in conflicts.items()]
        for i in range(0, len(params_list), 100):  # MLflow's limit per batch
            client.log_batch(parent_id, params=params_list[i : i + 100])
        for i in range(0, len(tag_list), 100):
            client.log_batch(parent_id, tags=tag_list[i : i + 100])
        now = int(time.time() * 1000)
        metric_list = [Metric(k, v, now, 0) for k, v in flat_metrics.items()]
        for i in range(0, len(metric_list), 1000):
            client.log_batch(parent_id, metrics=metric_list[i : i + 1000])
    return {"run_id": parent_id, "logged": sorted(new), "conflicts": conflicts, "metrics": flat_metrics}
