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
      (`reward.weights.success`, `env.fault_rate`). MLflow params are immutable, so a param is
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


# -- what a stage produced: its episodes as traces, its model as a logged model ----------

# The episodes of one infer stage logged as MLflow traces: the first ones only, so a run stays light.
TRACE_EPISODES = 20


class TrackingWarning(UserWarning):
    """Something could not be logged to MLflow; the stage goes on (tests turn it into an error)."""


def _active_run() -> Any:
    """The active MLflow run, or None: a flow run outside a stage (no run) logs nothing."""
    if "mlflow" not in sys.modules:  # a stage imports it before opening its run
        return None
    import mlflow

    return mlflow.active_run()


def _turns(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The turns of one episode row: what the model was shown, what it wrote, and what came of it.

    A row's `messages` are the system prompt and the task, then per turn the assistant's
    text followed by one `tool` message per call (or a user message correcting an
    unparseable turn); `calls` holds one record per call, or per unparseable turn, in order.
    """
    import json

    messages, calls = row["messages"], [json.loads(c) if isinstance(c, str) else c for c in row.get("calls", [])]
    first = next(i for i, m in enumerate(messages) if m["role"] == "user") + 1
    turns: list[dict[str, Any]] = []
    pending = iter(calls)
    for i in range(first, len(messages)):
        message = messages[i]
        if message["role"] == "assistant":
            shown = messages[:i]
            since = max((j for j, m in enumerate(shown) if m["role"] == "assistant"), default=first - 2) + 1  # the first turn sees the task
            turns.append({
                "prompt": {"messages": len(shown), "chars": sum(len(str(m.get("content") or "")) for m in shown), "new": shown[since:]},
                "text": message.get("content") or "",
                "tools": [],
                "feedback": None,
            })
        elif not turns:
            continue
        elif message["role"] == "tool":
            call = next(pending, None) or {}
            turns[-1]["tools"].append({"name": message.get("name") or call.get("name") or "", "arguments": call.get("arguments"), "observation": message.get("content"), "kind": call.get("kind", "ok")})
        else:  # the environment's correction of a turn it could not parse
            call = next(pending, None) or {}
            turns[-1]["feedback"] = {"kind": call.get("kind", "invalid"), "message": message.get("content")}
    return turns


def _episode_trace(row: dict[str, Any], experiment_id: str, tags: dict[str, str]) -> str:
    """Log one episode row as a trace: episode -> turn -> (generate, one span per tool call). Returns its id."""
    import mlflow
    from mlflow.entities import SpanType

    from star.env.core import WORKED

    query = next((m.get("content") for m in row["messages"] if m["role"] == "user"), "")
    outcome = "answered" if row.get("answer") else "truncated" if row.get("truncated") else "no answer"
    output = {"outcome": outcome, "answer": row.get("answer")}
    for key in ("plan", "success", "reward"):  # a teacher's row is judged already; a policy's is judged by `evaluate`
        if row.get(key) is not None:
            output[key] = row[key]
    counts = {k: row[k] for k in ("turns", "tool_calls", "tool_errors", "completion_tokens", "truncated") if k in row}
    root = mlflow.start_span_no_context(
        f"episode {row.get('query_id')}",
        span_type=SpanType.AGENT,
        inputs={"query": query, "query_id": row.get("query_id"), "level": row.get("level"), "days": row.get("days")},
        attributes={"policy": row.get("teacher"), "sample": row.get("sample"), **counts},
        tags={**tags, "star.query_id": str(row.get("query_id"))},
        experiment_id=experiment_id,
    )
    for n, turn in enumerate(_turns(row), 1):
        span = mlflow.start_span_no_context(f"turn {n}", span_type=SpanType.CHAIN, parent_span=root, inputs={"observation": turn["prompt"]["new"]})
        llm = mlflow.start_span_no_context(
            "generate", span_type=SpanType.LLM, parent_span=span,
            inputs={"prompt_messages": turn["prompt"]["messages"], "prompt_chars": turn["prompt"]["chars"]},
        )
        llm.end(outputs=turn["text"])
        for call in turn["tools"]:
            tool = mlflow.start_span_no_context(call["name"] or "unknown tool", span_type=SpanType.TOOL, parent_span=span, inputs=call["arguments"])
            tool.end(outputs={"observation": call["observation"], "kind": call["kind"]}, status="OK" if call["kind"] in WORKED else "ERROR")
        kind = "tool" if turn["tools"] else turn["feedback"]["kind"] if turn["feedback"] else "answer" if row.get("answer") else "cut"
        span.end(outputs={"kind": kind, **({"feedback": turn["feedback"]["message"]} if turn["feedback"] else {})})
    root.end(outputs=output)
    return root.trace_id


def log_episode_traces(rows: list[dict[str, Any]], limit: int | None = None) -> list[str]:
    """Log the first `limit` (default TRACE_EPISODES) episode rows as MLflow traces of the active run.

    Built after the fact from the rows a flow returns (`messages`, `calls`, `answer`, ...),
    so the library knows nothing of MLflow. Each trace is one episode: its root span holds
    the query and the outcome (answer, plan, success where the row has them), a child span
    per turn holds the model's generation (an LLM span) and one TOOL span per call with its
    arguments and observation. The traces carry the stage run's id (MLflow's
    `mlflow.sourceRun`) and its `star.*` tags. Nothing but the rows goes in: no params,
    no environment. Without an active run nothing is logged; a failure warns
    (TrackingWarning) and the stage goes on. Returns the trace ids.
    """
    run = _active_run()
    if run is None or not rows:
        return []
    ids: list[str] = []
    try:
        import mlflow

        tags = {k: v for k, v in run.data.tags.items() if k in ("star.stage", "star.pipeline")}
        for row in rows[: TRACE_EPISODES if limit is None else limit]:
            ids.append(_episode_trace(row, run.info.experiment_id, {**tags, "star.policy": str(row.get("teacher"))}))
        mlflow.flush_trace_async_logging()
    except Exception as exc:  # tracking must never fail a stage
        import warnings

        warnings.warn(f"episodes not logged as MLflow traces: {type(exc).__name__}: {exc}", TrackingWarning, stacklevel=2)
    return ids


def log_model(path: Path, params: dict[str, Any], metrics: dict[str, Any], register: bool = True) -> str | None:
    """Log the model a stage wrote at `path` as an MLflow logged model of the active run.

    The weights stay where they are (an external model: MLflow keeps only a small MLmodel
    stub); the model carries the stage's params, the tags `star.model_path` (the path as
    the pipeline names it) and `star.model_location` (the absolute path when logged), its
    final `metrics`, and is an output of the stage run (the runs table's Models column).
    It is named after the stage (the run's `star.stage` tag: `sft`, `qa_sft`, `grpo`) and,
    with `register`, is also a new version of the registered model `star-<stage>`.
    Without an active run nothing is logged; a failure warns (TrackingWarning) and the
    stage goes on. Returns the model id.
    """
    run = _active_run()
    if run is None:
        return None
    try:
        import mlflow
        from mlflow.entities import LoggedModelOutput

        path = Path(path)
        stage = run.data.tags.get("star.stage") or "model"
        tags = {
            "star.stage": stage,
            "star.model_path": path.as_posix(),
            "star.model_location": str(path.resolve()),
            **{k: v for k, v in run.data.tags.items() if k in ("star.pipeline", "star.git_commit", "star.params_hash")},
        }
        model = mlflow.create_external_model(
            name=stage, source_run_id=run.info.run_id, experiment_id=run.info.experiment_id,
            tags=tags, params=param_values(params), model_type="causal-lm",
        )
        client = mlflow.MlflowClient()
        client.log_outputs(run.info.run_id, [LoggedModelOutput(model.model_id, step=0)])
        if flat := _flat_metrics(metrics):
            mlflow.log_metrics(flat, run_id=run.info.run_id, model_id=model.model_id)
        if register:
            mlflow.register_model(f"models:/{model.model_id}", f"star-{stage}", tags={"star.model_path": path.as_posix()})
        return model.model_id
    except Exception as exc:  # tracking must never fail a stage
        import warnings

        warnings.warn(f"{path}: model not logged to MLflow: {type(exc).__name__}: {exc}", TrackingWarning, stacklevel=2)
        return None
