"""The comparison report, read from a real MLflow store filled the way the stages fill it."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from star.report import comparison_table, load_runs, main, markdown, varying_params, write_report

PNG = b"\x89PNG\r\n\x1a\n"
ENV = ("MLFLOW_TRACKING_URI", "DVC_EXP_NAME", "DVC_EXP_BASELINE_REV", "DVC_STAGE")

# name -> (grpo.reward, env.fault_rate, grpo final pass, sft final pass)
RUNS = {
    "sum-clean": ("SUM", 0.0, 0.30, 0.20),
    "success-clean": ("SUCCESS", 0.0, 0.40, 0.20),
    "sum-faulty": ("SUM", 0.1, 0.10, 0.15),
}
STEPS = [1, 2, 3, 4]


def evaluation(final: float) -> dict[str, float]:
    """What evaluate@<policy> logs: flat keys, levels joined with '_' (MLflow keys)."""
    metrics = {"n": 100.0, "final_pass_rate": final, "delivery_rate": 0.9, "commonsense_micro": 0.8,
               "commonsense_macro": 0.5, "hard_micro": 0.7, "hard_macro": 0.6}
    for i, level in enumerate(("easy", "medium", "hard")):
        metrics[f"{level}_final_pass_rate"] = final / (i + 1)
        metrics[f"{level}_delivery_rate"] = 0.9
    return metrics


def reward_at(name: str, step: int) -> float:
    return 0.1 * step + (0.05 if name.startswith("success") else 0.0)


def log_pipeline(root: Path, name: str, reward: str, fault_rate: float, grpo_pass: float, sft_pass: float) -> None:
    import mlflow

    from star.tracking import stage_run

    os.environ["DVC_EXP_NAME"] = name
    model = {"name_or_path": "builtin:tiny", "tool_schemas": False}
    with stage_run("sft", {"sft": {"learning_rate": 1e-4, "num_epochs": 8}, "model": model}, root):
        for step in STEPS:
            mlflow.log_metrics({"train/loss": 2.0 / step}, step=step)
        mlflow.log_metrics({"train_loss": 0.5, "wall_seconds": 1.0})
    grpo = {"grpo": {"reward": reward, "steps": 4, "output_dir": None}, "env": {"fault_rate": fault_rate, "row_cap": 20}, "model": model}
    with stage_run("grpo", grpo, root):
        for step in STEPS:
            mlflow.log_metrics(
                {"rollout/reward": reward_at(name, step), "rollout/success": step / 10, "train/loss": 1.0 / step}, step=step
            )
        mlflow.log_metrics({"seconds_per_step": 26.0, "train_loss": 0.1})
    if name == "sum-faulty":  # a later attempt that failed: its outputs never reached DVC
        with pytest.raises(RuntimeError), stage_run("grpo", grpo, root):
            mlflow.log_metrics({"rollout/reward": -1.0, "seconds_per_step": 99.0}, step=1)
            raise RuntimeError("interrupted")
    for policy, final in (("grpo", grpo_pass), ("sft", sft_pass)):
        with stage_run(f"evaluate@{policy}", {"evaluate": {"mode": "official"}}, root):
            mlflow.log_metrics(evaluation(final))
    if name == "sum-clean":  # a QA evaluation, logged by one run only
        with stage_run("evaluate_qa@grpo", {"evaluate_qa": {"split": "test"}}, root):
            mlflow.log_metrics({"em": 0.25, "f1": 0.5, "2hop/em": 0.125})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    import mlflow

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    previous = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as mp:
        for var in ENV:
            mp.delenv(var, raising=False)
        for name, spec in RUNS.items():
            log_pipeline(root, name, *spec)
        mp.delenv("DVC_EXP_NAME")
    mlflow.set_tracking_uri(previous)
    return root, uri


@pytest.fixture(scope="module")
def runs(store):
    return load_runs(store[1])


def test_one_run_per_pipeline_with_its_stages(runs):
    assert [r.name for r in runs] == list(RUNS)  # oldest first
    for run in runs:
        assert set(run.stages) >= {"sft", "grpo", "evaluate@grpo", "evaluate@sft"}
        assert run.params["grpo.reward"] == RUNS[run.name][0]
        assert run.params["model.name_or_path"] == "builtin:tiny"
        assert run.params["grpo.output_dir"] == ""  # None, as stage_run logs it
        assert run.finals["grpo"]["easy/final_pass_rate"] == pytest.approx(RUNS[run.name][2])
        assert set(run.train_minutes) == {"sft", "grpo"}
        assert run.train_minutes["grpo"] == pytest.approx(run.stages["grpo"].minutes)
        assert run.train_minutes["grpo"] >= 0
        assert run.stages["grpo"].status == "FINISHED"  # over a later failed attempt


def test_varying_params_are_exactly_the_varied_ones(runs):
    assert varying_params(runs) == ["env.fault_rate", "grpo.reward"]
    assert varying_params(runs[:2]) == ["grpo.reward"]
    assert varying_params(runs[:1]) == []


def test_table_holds_what_was_logged(runs):
    table = comparison_table(runs)
    assert table.height == len(RUNS)
    assert table["run"].to_list() == list(RUNS)
    assert table["grpo.reward"].to_list() == [spec[0] for spec in RUNS.values()]
    assert table["env.fault_rate"].to_list() == [spec[1] for spec in RUNS.values()]
    assert table["grpo/final_pass_rate"].to_list() == pytest.approx([spec[2] for spec in RUNS.values()])
    assert table["sft/final_pass_rate"].to_list() == pytest.approx([spec[3] for spec in RUNS.values()])
    assert table["grpo/hard/final_pass_rate"].to_list() == pytest.approx([spec[2] / 3 for spec in RUNS.values()])
    assert table["grpo/commonsense_macro"].to_list() == pytest.approx([0.5] * 3)
    assert table["grpo/hard_micro"].to_list() == pytest.approx([0.7] * 3)  # a metric, not the level `hard`
    assert table["grpo/hard_macro"].to_list() == pytest.approx([0.6] * 3)
    # any metric of any evaluate* stage, null where a run did not log it
    assert table["grpo/em"].to_list() == [0.25, None, None]
    assert table["grpo/2hop/em"].to_list() == [0.125, None, None]
    assert table["grpo_seconds_per_step"].to_list() == [26.0] * 3
    assert table["grpo_minutes"].to_list() == pytest.approx([r.train_minutes["grpo"] for r in runs])
    # counts and per-level metrics other than the final pass stay out of the table
    assert "grpo/n" not in table.columns and "grpo/easy/delivery_rate" not in table.columns
    # the references are left out unless asked for
    assert [c for c in table.columns if c.startswith("sft/")][0] == "sft/final_pass_rate"
    only = comparison_table(runs, policies=["sft"])
    assert not [c for c in only.columns if c.startswith("grpo/")]

    text = markdown(table)
    lines = text.splitlines()
    assert len(lines) == 2 + len(RUNS)
    assert lines[0].startswith("| run | env.fault_rate | grpo.reward | grpo/final_pass_rate |")
    assert "| sum-faulty | 0.1 | SUM | 10.0% |" in text
    assert "| success-clean | 0 | SUCCESS | 40.0% |" in text


def test_curves_have_the_logged_steps(runs):
    for run in runs:
        reward = run.curves["rollout/reward"]
        assert reward.steps == STEPS
        assert reward.values == pytest.approx([reward_at(run.name, s) for s in STEPS])
        assert run.curves["rollout/success"].values == pytest.approx([s / 10 for s in STEPS])
        assert "train/loss" not in run.curves


def test_filters(store, runs):
    uri = store[1]
    assert [r.name for r in load_runs(uri, filter_string="tags.`star.pipeline` LIKE 'sum-%'")] == ["sum-clean", "sum-faulty"]
    assert [r.name for r in load_runs(uri, where={"env.fault_rate": 0.1})] == ["sum-faulty"]
    assert load_runs(uri, experiment="absent") == []


def test_report_files(runs, tmp_path):
    import json

    paths = write_report(runs, tmp_path / "compare")
    assert set(paths) == {"markdown", "json", "csv", "pass_rates", "grpo_curves", "pass_vs_env.fault_rate"}
    for path in paths.values():
        assert path.is_file() and path.stat().st_size > 0
    for name in ("pass_rates", "grpo_curves", "pass_vs_env.fault_rate"):
        assert paths[name].read_bytes()[:8] == PNG
    report = paths["markdown"].read_text()
    assert "`env.fault_rate`, `grpo.reward`" in report and "](grpo_curves.png)" in report
    data = json.loads(paths["json"].read_text())
    assert [r["name"] for r in data["runs"]] == list(RUNS)
    assert data["table"][1]["grpo/final_pass_rate"] == pytest.approx(0.40)
    assert not list((tmp_path / "compare").glob(".tmp-*"))
    # filter.examples does not vary: no plot for it; one run alone has no sweep plot either
    single = write_report(runs[:1], tmp_path / "single")
    assert "pass_vs_env.fault_rate" not in single and "pass_vs_filter.examples" not in single


def test_a_qa_only_comparison_shows_em_by_hops(runs, tmp_path):
    from star.report import PipelineRun, plot_pass_rates

    qa = [PipelineRun(name=f"qa-{i}", run_id=str(i), finals={"qa_sft": {"2hop/em": 0.5, "f1": 0.6, "em": 0.4, "4hop/em": 0.2}}) for i in range(2)]
    table = comparison_table(qa)
    # the domain's headline metrics, then its first metric per level, as its specs declare them
    assert [c for c in table.columns if c.startswith("qa_sft/")] == ["qa_sft/em", "qa_sft/f1", "qa_sft/2hop/em", "qa_sft/4hop/em"]
    assert plot_pass_rates(qa, tmp_path / "qa.png") and (tmp_path / "qa.png").read_bytes()[:8] == PNG


def test_cli(store, tmp_path, capsys):
    assert main(["--tracking-uri", store[1], "--out", str(tmp_path / "out"), "--where", "grpo.reward=SUCCESS"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[2].startswith("| success-clean |")
    assert (tmp_path / "out" / "report.md").is_file()
    assert main(["--tracking-uri", store[1], "--out", str(tmp_path / "none"), "--filter", "tags.`star.pipeline` = 'x'"]) == 1


def test_pipeline_summary_on_the_parent(tmp_path, monkeypatch):
    import mlflow

    from star.tracking import CONFLICT_TAG, log_pipeline_summary, stage_run

    for var in ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DVC_EXP_NAME", "summarized")
    previous = mlflow.get_tracking_uri()
    params = {"grpo": {"reward": "SUM", "beta": 0.0}, "env": {"fault_rate": 0.05}, "format": {"llm": {"model": None}}}
    metrics = {"grpo": {"final_pass_rate": 0.3, "easy": {"final_pass_rate": 0.5}}, "sft": {"final_pass_rate": 0.2}, "ok": True, "note": "x"}
    first = log_pipeline_summary(tmp_path, params, metrics)  # before any stage: creates the parent
    with stage_run("grpo", {"grpo": params["grpo"]}, tmp_path):
        pass
    again = log_pipeline_summary(tmp_path, params, {"grpo": {"final_pass_rate": 0.35}})
    changed = log_pipeline_summary(tmp_path, {"grpo": {"reward": "SUCCESS", "steps": 3}}, {})
    mlflow.set_tracking_uri(previous)

    assert first["run_id"] == again["run_id"] == changed["run_id"]
    assert first["logged"] == ["env.fault_rate", "format.llm.model", "grpo.beta", "grpo.reward"]
    assert first["metrics"] == {"grpo/final_pass_rate": 0.3, "grpo/easy/final_pass_rate": 0.5, "sft/final_pass_rate": 0.2, "ok": 1.0}
    assert again["logged"] == [] and again["conflicts"] == {}
    assert changed["logged"] == ["grpo.steps"] and changed["conflicts"] == {"grpo.reward": ("SUM", "SUCCESS")}

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = client.get_run(first["run_id"])
    assert parent.data.tags["star.role"] == "pipeline" and parent.data.tags["star.pipeline"] == "summarized"
    assert parent.data.params == {"grpo.reward": "SUM", "grpo.beta": "0.0", "env.fault_rate": "0.05", "format.llm.model": "", "grpo.steps": "3"}
    assert parent.data.tags[f"{CONFLICT_TAG}grpo.reward"] == "SUCCESS"
    assert parent.data.metrics["grpo/final_pass_rate"] == 0.35  # the latest
    assert parent.data.metrics["sft/final_pass_rate"] == 0.2

    # the report reads the parent: its params, and the finals no evaluate child logged
    [run] = load_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert set(run.stages) == {"grpo"}
    assert run.params["env.fault_rate"] == "0.05" and run.params["grpo.steps"] == "3"
    assert run.finals["sft"] == {"final_pass_rate": 0.2}
    assert run.finals["grpo"]["easy/final_pass_rate"] == 0.5


def _worker(root: str, name: str, barrier) -> None:
    import mlflow

    from star.tracking import stage_run

    for var in ENV:
        os.environ.pop(var, None)
    os.environ["DVC_EXP_NAME"] = name
    barrier.wait()  # both start on the fresh store at once
    for stage in ("sft", "grpo", "evaluate@grpo"):
        with stage_run(stage, {"run": {"name": name}}, Path(root)):
            mlflow.log_metrics({"x": 1.0})


@pytest.mark.slow
def test_concurrent_pipelines_share_one_store(tmp_path):
    import mlflow

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), name, barrier)) for name in ("exp-a", "exp-b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [experiment] = [e for e in client.search_experiments() if e.name == "star"]
    parents = client.search_runs([experiment.experiment_id], "tags.`star.role` = 'pipeline'")
    assert sorted(p.data.tags["star.pipeline"] for p in parents) == ["exp-a", "exp-b"]
    for parent in parents:
        children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        assert sorted(c.data.tags["star.stage"] for c in children) == ["evaluate@grpo", "grpo", "sft"]
        assert {c.data.tags["star.pipeline"] for c in children} == {parent.data.tags["star.pipeline"]}
        assert {c.info.status for c in children} == {"FINISHED"}
    assert len(client.search_runs([experiment.experiment_id], "")) == 8
    runs = load_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert sorted(r.name for r in runs) == ["exp-a", "exp-b"]
    assert all(r.params == {"run.name": r.name} for r in runs)


def test_a_queued_experiment_logs_to_the_repository_store(tmp_path, monkeypatch):
    from star.tracking import tracking_uri

    copy = tmp_path / ".dvc" / "tmp" / "exps" / "tmpabc"  # where DVC runs a queued experiment
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert tracking_uri(copy) == f"sqlite:///{(copy / 'mlflow.db').resolve()}"
    monkeypatch.setenv("DVC_ROOT", str(tmp_path))
    assert tracking_uri(copy) == f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
