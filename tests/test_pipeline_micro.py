"""The whole DAG on the micro profile, as a real DVC experiment in a fresh git repo."""

import ast
import json
from pathlib import Path

import pytest
from pipeline_repo import exp_run, imports_dir, mlflow_runs, new_repo, sh

from star.qa.evaluate import NAIVE_RAG_SYSTEM_PROMPT

pytestmark = pytest.mark.slow
POLICIES = ("base", "sft", "grpo", "teacher")
STAGES = {"world", "synthesize", "distill", "base", "copy", "filter", "sft", "grpo", "results", "report", "infer_teacher"}
STAGES |= {f"{kind}@{p}" for kind in ("format", "evaluate") for p in POLICIES} | {f"infer@{p}" for p in ("base", "sft", "grpo")}
STAGES |= {"probe@sft", "probe@grpo"}
QA_POLICIES = (
    "qa_base", "qa_sft", "qa_grpo", "naive_rag", "base_tool_call", "travel_base", "travel_sft", "travel_grpo",
    "travel_base_naive_rag", "travel_sft_naive_rag", "travel_grpo_naive_rag", "qa_teacher",
)
STAGES |= {f"qa_{s}" for s in ("world", "synthesize", "distill", "base", "copy", "filter", "sft", "grpo", "infer_teacher")}
STAGES |= {f"qa_infer@{p}" for p in QA_POLICIES if p != "qa_teacher"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    return new_repo(tmp_path_factory.mktemp("micro"), ("params.micro.yaml",))


def micro(repo: Path, extra: str = "") -> str:
    return exp_run(repo, ("params.micro.yaml",), extra)


def test_micro_pipeline_end_to_end(repo):
    out = micro(repo)
    for stage in STAGES:
        assert f"Running stage '{stage}'" in out, stage
    for path in ("data/world/flights.parquet", "data/queries/test.jsonl", "data/trajectories/trajectories.jsonl", "data/sft/train.jsonl"):
        assert (repo / path).stat().st_size > 0, path
    for model in ("base", "sft", "grpo"):
        assert (repo / "models" / model / "config.json").exists(), model
    everything = json.loads((repo / "reports/results.json").read_text())
    results = everything["travel"]
    assert set(results) == set(POLICIES)
    for policy in POLICIES:
        rows = (repo / f"data/infer/{policy}/trajectories.jsonl").read_text().splitlines()
        assert len(rows) == 12  # the micro test split
        plans = (repo / f"data/plans/{policy}.jsonl").read_text().splitlines()
        assert len(plans) == 12
        metrics = json.loads((repo / f"reports/{policy}/metrics.json").read_text())
        assert metrics == results[policy] and 0.0 <= metrics["final_pass_rate"] <= 1.0
        assert "easy/final_pass_rate" in metrics
    # The expert teacher, without deliberate mistakes, solves its own test queries.
    assert results["teacher"]["final_pass_rate"] == 1.0
    assert (repo / "reports/pass_rates.png").stat().st_size > 1000
    assert "| **final pass** |" in (repo / "reports/results.md").read_text()
    # Argument accuracy per slot, on the test queries and on their counterfactual copies.
    for policy in ("sft", "grpo"):
        arguments = everything["arguments"][policy]
        assert arguments == json.loads((repo / f"reports/{policy}/arguments.json").read_text())
        assert arguments["args/n"] >= 0 and arguments["counterfactual/n"] >= 0  # a micro model may make no travel call
        assert all(0.0 <= v <= 1.0 for k, v in arguments.items() if not k.endswith("/n"))
        assert (repo / f"reports/{policy}/arguments.csv").read_text().startswith("slot,test,counterfactual\n")
    assert "| slot | grpo test | grpo counterfactual |" in (repo / "reports/results.md").read_text()

    # The QA domain, its baselines and the travel agent out of its domain, on the same 12 questions.
    qa = everything["qa"]
    assert set(qa) == set(QA_POLICIES)
    for policy in QA_POLICIES:
        rows = (repo / f"data/qa/infer/{policy}/trajectories.jsonl").read_text().splitlines()
        assert len(rows) == 12, policy
        assert 0.0 <= qa[policy]["em"] <= qa[policy]["f1"] <= 1.0
    assert qa["qa_teacher"]["em"] == 1.0
    # The alignment tax comes with a paired CI: QA exact match after travel training minus before, per question.
    # On the QA agent's prompt and on Naive RAG's.
    for policy, base in (("sft", "base"), ("grpo", "base"), ("sft_naive_rag", "base_naive_rag"), ("grpo_naive_rag", "base_naive_rag")):
        gain = everything["gains"][f"qa travel_{policy} - travel_{base} em"]
        assert gain["gain"] == pytest.approx(-everything[f"alignment_tax_{policy}"]) and gain["ci_low"] <= gain["gain"] <= gain["ci_high"]
    naive_rag = [json.loads(r) for r in (repo / "data/qa/infer/travel_sft_naive_rag/trajectories.jsonl").read_text().splitlines()]
    assert all(r["messages"][0]["content"] == NAIVE_RAG_SYSTEM_PROMPT and r["tool_calls"] == 0 for r in naive_rag)  # asked as Naive RAG asks
    assert "| naive_rag | baseline: Naive RAG |" in (repo / "reports/results.md").read_text()
    assert (repo / "reports/qa_em.png").stat().st_size > 1000
    # The comparison report, from the MLflow store.
    assert "| run |" in (repo / "reports/compare/report.md").read_text()
    for curve in ("sft", "grpo", "qa_sft", "qa_grpo"):
        assert (repo / f"reports/train/{curve}.csv").read_text().startswith("step,"), curve

    all_runs = mlflow_runs(repo)
    stages = [r for r in all_runs if r.data.tags.get("star.role") == "stage"]
    parents = [r for r in all_runs if r.data.tags.get("star.role") == "pipeline"]
    assert len(parents) == 1 and parents[0].data.tags["star.pipeline"] == parents[0].data.tags["dvc.exp_name"]
    assert {r.data.tags["star.stage"] for r in stages} == STAGES
    # The parent carries the configuration and the final metrics, for MLflow's compare view.
    assert parents[0].data.params["reward.weights.sum"] == "1.0" and "sft/final_pass_rate" in parents[0].data.metrics
    assert all(r.info.status == "FINISHED" and r.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for r in stages)
    grpo = next(r for r in stages if r.data.tags["star.stage"] == "grpo")
    assert grpo.data.params["reward.weights.sum"] == "1.0" and grpo.data.metrics["steps"] == 2
    import mlflow

    history = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}").get_metric_history(grpo.info.run_id, "rollout/reward")
    assert {m.step for m in history} == {1, 2}  # logged per step
    sft = next(r for r in stages if r.data.tags["star.stage"] == "sft")
    assert sft.data.metrics["tokens_per_second"] > 0


def dvc_stages(repo: Path) -> dict[str, tuple[str, list[str]]]:
    """Every stage of dvc.yaml, foreach expanded: the record name of its command, and its deps."""
    import yaml

    stages = {}
    for name, stage in yaml.safe_load((repo / "dvc.yaml").read_text())["stages"].items():
        items = stage.get("foreach")
        body = stage.get("do", stage)
        expanded = {None: None} if items is None else dict(zip(items, items)) if isinstance(items, list) else items
        for key, item in expanded.items():
            fill = lambda text: text.replace("${item}", str(item)).replace("${key}", str(key))  # noqa: E731
            cmd = fill(body["cmd"]).split()
            assert cmd[:2] == ["python", "-m"], cmd
            stages[name if key is None else f"{name}@{key}"] = (" ".join(cmd[2:]), [fill(d) for d in body.get("deps", [])])
    return stages


# Files a stage imports that cannot change its outputs, so no stage lists them:
# running and tracking a stage, its allocator, and the params schema. params.yaml states every
# knob (test_config checks it equals the code defaults), so a stage's values all
# come from the params DVC tracks, never from a default in the schema.
NOT_DEPS = {
    "stages/__init__.py",
    "star/allocator.py",
    "star/agent/limits.py",
    "stages/common.py",
    "flows/__init__.py",
    "flows/tasks.py",
    "star/tracking.py",
    "star/service.py",
    "star/config.py",
    "star/sections.py",
    "star/endpoint.py",
    "star/models/spec.py",
    "star/qa/specs.py",
    "star/train/copy_params.py",
    "star/train/grpo_params.py",
    "star/train/sft_params.py",
    "star/travel/specs.py",
}


def docstring_only(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


# Files a stage imports only on a path the micro run does not take, chosen by a param: the
# OpenAI-compatible teacher (teacher.kind: openai), the llm formatter (format.kind: llm), and the
# backends other than transformers (infer.backend: openai or vllm, grpo.backend: vllm).
OPENAI_TEACHER = {"star/travel/planner/openai_teacher.py", "star/llm_client.py"}
INFER_BACKENDS = {"star/agent/openai_backend.py", "star/llm_client.py", "star/agent/vllm_backend.py"}
GRPO_BACKENDS = {"star/agent/vllm_backend.py", "star/agent/vllm_sync.py"}
UNTAKEN = {
    "distill": OPENAI_TEACHER,
    "infer_teacher": OPENAI_TEACHER,
    "format": {"star/travel/plans/format_llm.py", "star/llm_client.py"},
    "infer": INFER_BACKENDS,
    "probe": INFER_BACKENDS,
    "qa_infer": INFER_BACKENDS,
    "grpo": GRPO_BACKENDS,
    "qa_grpo": GRPO_BACKENDS,
}


def test_each_stage_depends_on_the_code_it_ran(repo):
    # After the end-to-end run: a stage that imported a file outside its deps would not re-run when it
    # changes, and one that lists a file it never imports re-runs for nothing.
    missing, unused = {}, {}
    for name, (command, deps) in dvc_stages(repo).items():
        record = imports_dir(repo) / f"{command}.txt"
        assert record.exists(), f"{name} left no import record"
        files = record.read_text().split()
        assert f"{command.split()[0].replace('.', '/')}.py" in files
        uncovered = [f for f in files if f not in NOT_DEPS and not any(f == d or f.startswith(d.rstrip("/") + "/") for d in deps)]
        # A package's __init__.py that holds only a docstring has nothing to change.
        uncovered = [f for f in uncovered if not (f.endswith("__init__.py") and docstring_only(repo / f))]
        if uncovered:
            missing[name] = uncovered
        idle = [d for d in deps if d.endswith(".py") and d not in files and d not in UNTAKEN.get(name.split("@")[0], ())]
        if idle:
            unused[name] = idle
    assert not missing, "dvc.yaml deps miss imported files:\n" + "\n".join(f"{k}: {' '.join(v)}" for k, v in missing.items())
    assert not unused, "dvc.yaml deps list files the stage never imported:\n" + "\n".join(f"{k}: {' '.join(v)}" for k, v in unused.items())


def test_changing_the_reward_reruns_only_grpo_and_after(repo):
    out = micro(repo, "-S reward.weights.sum=0.0 -S reward.weights.success=1.0")
    ran = {line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '")}
    assert "grpo" in ran
    # Nothing upstream runs; what follows runs only if the model changed (DVC compares hashes).
    assert not ran & {"world", "synthesize", "distill", "base", "copy", "filter", "sft", "infer@sft", "infer@base", "infer_teacher"}
    grpo_runs = [r for r in mlflow_runs(repo) if r.data.tags.get("star.stage") == "grpo"]
    assert sorted(r.data.params["reward.weights.success"] for r in grpo_runs) == ["0.0", "1.0"]


def test_reverting_restores_from_the_run_cache(repo):
    out = micro(repo, "-S reward.weights.sum=1.0 -S reward.weights.success=0.0")
    assert "Stage 'grpo' is cached - skipping run, checking out outputs" in out
    assert "Running stage 'grpo'" not in out
    grpo_runs = [r for r in mlflow_runs(repo) if r.data.tags.get("star.stage") == "grpo"]
    assert len(grpo_runs) == 2  # nothing was trained again


@pytest.mark.parametrize(
    "key, value, stages",
    [
        ("reward.weights.macro", 1.0, {"grpo"}),
        ("env.fault_rate", 0.3, {"grpo", "qa_grpo"}),
        ("qa.reward.weights.em", 1.0, {"qa_grpo"}),
        ("grpo.learning_rate", 0.001, {"grpo"}),  # QA GRPO takes its own from qa.grpo
        ("qa.grpo.learning_rate", 0.001, {"qa_grpo"}),
        ("filter.examples", 20, {"filter"}),
        ("copy_pretrain.learning_rate", 0.001, {"copy", "qa_copy"}),
        ("sft.learning_rate", 0.001, {"sft", "qa_sft"}),
        ("infer.max_turns", 3, {f"infer@{p}" for p in ("base", "sft", "grpo")} | {"probe@sft", "probe@grpo"} | {f"qa_infer@{p}" for p in QA_POLICIES if p != "qa_teacher"}),
    ],
)
def test_a_param_change_touches_only_the_stages_that_read_it(repo, key, value, stages):
    import yaml

    original = (repo / "params.yaml").read_text()
    assert json.loads(sh("dvc status --json", repo)) == {}
    params = yaml.safe_load(original)
    *path, last = key.split(".")
    section = params
    for part in path:
        section = section[part]
    section[last] = value
    try:
        (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        # DVC lists the stages whose own params changed; what follows them re-runs once their outputs change.
        assert set(json.loads(sh("dvc status --json", repo))) == stages
    finally:
        (repo / "params.yaml").write_text(original)


def test_grpo_on_vllm_writes_a_model_and_logs_a_small_mismatch(repo, monkeypatch):
    """The grpo stage with backend vllm: it runs itself in .venv-vllm, syncs the engine every step, logs the mismatch.

    float32 on both sides, so the sampler's log-probabilities of the trained tokens
    are the trainer's to rounding; an engine left on older weights shows ~1 here.
    Last in this module: it leaves params.yaml with its overrides.
    """
    import mlflow
    import polars as pl

    vllm_python = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
    assert vllm_python.is_file(), f"no {vllm_python}: build vLLM's venv with `make vllm`"
    monkeypatch.setenv("STAR_VLLM_PYTHON", str(vllm_python))
    flags = "-S grpo.backend=vllm -S grpo.vllm.dtype=float32 -S grpo.vllm.enforce_eager=true -S grpo.mask_truncated_completions=false"
    out = micro(repo, f"-s grpo {flags}")
    assert "Running stage 'grpo'" in out and (repo / "models/grpo/model.safetensors").stat().st_size > 0
    curve = pl.read_csv(repo / "reports/train/grpo.csv")
    assert curve.height == 2
    assert curve["rollout_mismatch_abs"].max() < 1e-3 and curve["rollout_mismatch_max_ratio"].max() < 1.01, curve
    run = max((r for r in mlflow_runs(repo) if r.data.tags.get("star.stage") == "grpo"), key=lambda r: r.info.start_time)
    assert run.data.params["grpo.backend"] == "vllm"
    history = mlflow.MlflowClient(f"sqlite:///{repo / 'mlflow.db'}").get_metric_history(run.info.run_id, "rollout/mismatch_abs")
    assert {m.step for m in history} == {1, 2} and all(m.value < 1e-3 for m in history)  # step 2's again with the run's summary
