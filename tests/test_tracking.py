"""Stage runs in a real MLflow store: a killed stage's run does not stay RUNNING; a stage lists the splits it reads."""

from __future__ import annotations

import pytest

from star.tracking import EXPERIMENT, file_hash, stage_run, tracking_uri


@pytest.fixture
def root(tmp_path, monkeypatch):
    for var in ("MLFLOW_TRACKING_URI", "DVC_EXP_BASELINE_REV", "DVC_STAGE", "DVC_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DVC_EXP_NAME", "exp-a")
    return tmp_path


def _status(client, run_id):
    return client.get_run(run_id).info.status


def test_a_new_stage_run_closes_the_runs_its_pipeline_left_running(root, monkeypatch):
    import mlflow

    previous = mlflow.get_tracking_uri()
    with stage_run("distill", {"teacher": {"samples": 1}}, root):  # creates the store and the parent
        pass
    client = mlflow.MlflowClient(tracking_uri(root))
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    # What `kill -9` mid-stage leaves: a stage run never terminated, in this pipeline and in another one.
    killed = client.create_run(experiment, run_name="sft", tags={"star.pipeline": "exp-a", "star.role": "stage", "star.stage": "sft"})
    other = client.create_run(experiment, run_name="sft", tags={"star.pipeline": "exp-b", "star.role": "stage", "star.stage": "sft"})
    assert _status(client, killed.info.run_id) == "RUNNING"

    with stage_run("grpo", {"grpo": {"steps": 1}}, root) as run:
        assert _status(client, run.info.run_id) == "RUNNING"
        assert _status(client, killed.info.run_id) == "KILLED"
    assert _status(client, run.info.run_id) == "FINISHED"
    assert _status(client, other.info.run_id) == "RUNNING"  # another pipeline's run may be alive: left alone
    mlflow.set_tracking_uri(previous)


def test_a_run_whose_process_is_gone_is_closed_whatever_its_pipeline(root, monkeypatch):
    import os
    import socket
    import subprocess
    import sys

    import mlflow

    previous = mlflow.get_tracking_uri()
    with stage_run("distill", {"teacher": {"samples": 1}}, root):
        pass
    client = mlflow.MlflowClient(tracking_uri(root))
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True).stdout.strip()
    here = {"star.role": "stage", "star.stage": "sft", "star.host": socket.gethostname()}
    # A stage of an older commit's pipeline, killed: its process no longer exists.
    dead = client.create_run(experiment, run_name="sft", tags={**here, "star.pipeline": "old-commit", "star.pid": gone})
    # A queued experiment's stage running beside this one: its process is alive.
    alive = client.create_run(experiment, run_name="sft", tags={**here, "star.pipeline": "exp-b", "star.pid": str(os.getppid())})
    elsewhere = client.create_run(experiment, run_name="sft", tags={**here, "star.pipeline": "exp-c", "star.pid": gone, "star.host": "another-host"})

    with stage_run("grpo", {"grpo": {"steps": 1}}, root) as run:
        assert client.get_run(run.info.run_id).data.tags["star.pid"] == str(os.getpid())
        assert _status(client, dead.info.run_id) == "KILLED"
        assert _status(client, alive.info.run_id) == "RUNNING"
        assert _status(client, elsewhere.info.run_id) == "RUNNING"  # another host's processes cannot be checked
    mlflow.set_tracking_uri(previous)


def test_a_new_store_keeps_its_artifacts_beside_it(root, monkeypatch):
    import mlflow

    monkeypatch.chdir(root)  # where MLflow's default, ./mlruns, would put them
    previous = mlflow.get_tracking_uri()
    (root / "note.txt").write_text("x")
    with stage_run("results", {"evaluate": {"mode": "official"}}, root):
        mlflow.log_artifact(str(root / "note.txt"))
    client = mlflow.MlflowClient(tracking_uri(root))
    assert client.get_experiment_by_name(EXPERIMENT).artifact_location == (root / "mlartifacts").resolve().as_uri()
    assert list((root / "mlartifacts").rglob("note.txt")) and not (root / "mlruns").exists()
    mlflow.set_tracking_uri(previous)


def test_the_parent_run_spans_its_stages_and_sums_their_time(root, monkeypatch):
    import time

    import mlflow

    previous = mlflow.get_tracking_uri()
    with stage_run("world", {}, root) as first:
        time.sleep(0.3)
    time.sleep(0.3)  # between stages: counts in the span, not in the stage time
    with stage_run("distill", {}, root) as second:
        time.sleep(0.3)
    client = mlflow.MlflowClient(tracking_uri(root))
    stages = [client.get_run(r.info.run_id).info for r in (first, second)]
    parent = client.get_run(client.get_run(second.info.run_id).data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FINISHED" and parent.info.end_time >= stages[1].end_time
    span = (parent.info.end_time - parent.info.start_time) / 1000
    stage_s = sum(s.end_time - s.start_time for s in stages) / 1000
    assert span >= 0.9 and abs(parent.data.metrics["pipeline_wall_s"] - span) < 0.5
    assert 0.6 <= parent.data.metrics["pipeline_stage_s"] < span and abs(parent.data.metrics["pipeline_stage_s"] - stage_s) < 0.5

    with pytest.raises(RuntimeError), stage_run("sft", {}, root) as failed:  # a failing stage still ends the span
        raise RuntimeError("boom")
    assert client.get_run(failed.info.run_id).info.status == "FAILED"
    assert client.get_run(parent.info.run_id).info.end_time >= client.get_run(failed.info.run_id).info.end_time
    mlflow.set_tracking_uri(previous)


def _inputs(client, run_id):
    """{name: (digest, context, source, rows)} of a run's dataset inputs."""
    import json

    found = {}
    for item in client.get_run(run_id).inputs.dataset_inputs:
        d, tags = item.dataset, {t.key: t.value for t in item.tags}
        found[d.name] = (d.digest, tags.get("mlflow.data.context"), json.loads(d.source)["uri"], json.loads(d.profile)["num_rows"])
    return found


def test_a_stage_run_lists_the_splits_it_reads_as_dataset_inputs(root, monkeypatch):
    import json
    from pathlib import Path

    import mlflow

    from stages.common import run_stage

    monkeypatch.chdir(root)  # run_stage works in the repository: params.yaml and data/ relative to it
    previous = mlflow.get_tracking_uri()
    (root / "params.yaml").write_text("{}\n")
    queries, questions = root / "data/queries", root / "data/qa/questions"
    queries.mkdir(parents=True)
    questions.mkdir(parents=True)
    rows = [{"id": i, "query": f"trip {i}", "constraints": {"days": 3}} for i in range(3)]
    (queries / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (queries / "test.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (questions / "test.jsonl").write_text('{"question": "who?", "answer": "me"}\n')
    runs = []

    def flow(**kwargs):
        runs.append(mlflow.active_run().info.run_id)
        return {}

    def probe():
        run_stage(
            "probe@sft", [], flow,
            train=Path("data/queries/train.jsonl"), queries=Path("data/queries/test.jsonl"),
            questions=Path("data/qa/questions/test.jsonl"),
            sft_set=Path("data/sft/train.jsonl"),  # missing: skipped
            out=Path("data/queries"), model_dir=None,  # not split files
        )

    probe()
    client = mlflow.MlflowClient(tracking_uri(root))
    first = _inputs(client, runs[0])
    assert set(first) == {"queries/train", "queries/test", "qa/questions/test"}
    assert first["queries/train"][1:] == ("training", "data/queries/train.jsonl", 3)
    assert first["queries/test"][1:] == ("evaluation", "data/queries/test.jsonl", 1)
    assert first["qa/questions/test"][1:] == ("evaluation", "data/qa/questions/test.jsonl", 1)
    assert len({digest for digest, *_ in first.values()}) == 3

    (queries / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))  # new train split, same test split
    probe()
    second = _inputs(client, runs[1])
    assert second["queries/test"][0] == first["queries/test"][0]
    assert second["qa/questions/test"][0] == first["qa/questions/test"][0]
    assert second["queries/train"][0] != first["queries/train"][0] and second["queries/train"][3] == 2
    mlflow.set_tracking_uri(previous)


def test_a_split_that_is_not_json_is_listed_without_rows(root, monkeypatch):
    import mlflow

    from star.tracking import log_datasets

    previous = mlflow.get_tracking_uri()
    (root / "train.jsonl").write_text("not json\n")
    with stage_run("sft", {}, root) as run:
        assert log_datasets({"sft/train": (root / "train.jsonl", "training"), "sft/gone": (root / "gone.jsonl", "training")}) == ["sft/train"]
    found = _inputs(mlflow.MlflowClient(tracking_uri(root)), run.info.run_id)
    assert list(found) == ["sft/train"] and found["sft/train"][1] == "training" and found["sft/train"][3] == 0
    assert found["sft/train"][0] == file_hash(root / "train.jsonl")
    mlflow.set_tracking_uri(previous)
