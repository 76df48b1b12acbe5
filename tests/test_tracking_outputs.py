"""What stages leave in a real MLflow store beside their runs: infer's episodes as traces, sft's and grpo's models.

The flows run for real, without Prefect's task wrapper (`.fn`): a Prefect server would
cost more than the flows themselves.
"""

from __future__ import annotations

import json
import os

import pytest

from star.tracking import TrackingWarning, log_episode_traces, log_model, stage_run, tracking_uri
from star.travel.domain import TravelDomain

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# A logging failure only warns in a stage; here it fails the test.
pytestmark = pytest.mark.filterwarnings("error::star.tracking.TrackingWarning")
SECRET = "sk-test-never-in-a-trace"


@pytest.fixture
def root(tmp_path, monkeypatch):
    import mlflow

    for var in ("MLFLOW_TRACKING_URI", "DVC_EXP_BASELINE_REV", "DVC_STAGE", "DVC_ROOT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DVC_EXP_NAME", "exp-a")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    previous = mlflow.get_tracking_uri()
    yield tmp_path
    mlflow.set_tracking_uri(previous)


@pytest.fixture(scope="module")
def travel(tmp_path_factory, synthetic_sandbox):
    """A saved world, six test queries, and the expert's episodes on them with tool faults."""
    from star.travel.planner.distill import ExpertTeacher, run_episode
    from star.travel.planner.expert import Expert
    from star.travel.specs import SynthesisSpec
    from star.travel.world.sandbox_index import index_for
    from star.travel.world.synthesize import Synthesizer
    from star.travel.world.tools import TravelTools

    work = tmp_path_factory.mktemp("travel")
    synthetic_sandbox.save(work / "world")
    queries = Synthesizer(synthetic_sandbox, SynthesisSpec(seed=3, sizes={"train": 0, "validation": 0, "test": 6})).run()["test"]
    (work / "test.jsonl").write_text("".join(q.model_dump_json() + "\n" for q in queries))
    tools, index = TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)
    rows = [run_episode(ExpertTeacher(Expert(0.3)), tools, index, q, 0, seed=0, max_turns=16, fault_rate=0.4) for q in queries]
    return {"dir": work, "world": work / "world", "queries": work / "test.jsonl", "rows": rows, "sandbox": synthetic_sandbox}


def _traces(root, run_id):
    """The traces of one run, oldest first."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri(root))
    experiment = client.get_run(run_id).info.experiment_id
    found = client.search_traces(locations=[experiment], filter_string=f"metadata.`mlflow.sourceRun` = '{run_id}'", max_results=100)
    return sorted((client.get_trace(t.info.trace_id) for t in found), key=lambda t: t.info.request_time)


def _children(trace, span):
    return [s for s in trace.data.spans if s.parent_id == span.span_id]


def check_episode(trace, row, run_id):
    """The trace is the row's episode: episode -> turns -> (one LLM span, one TOOL span per call)."""
    messages = row["messages"]
    assert trace.info.trace_metadata["mlflow.sourceRun"] == run_id
    assert trace.info.tags["star.query_id"] == str(row["query_id"]) and trace.info.tags["star.policy"] == row["teacher"]
    episode = next(s for s in trace.data.spans if s.parent_id is None)
    assert episode.span_type == "AGENT" and episode.name == f"episode {row['query_id']}"
    assert episode.inputs["query"] == next(m["content"] for m in messages if m["role"] == "user")
    assert episode.outputs["answer"] == row["answer"]
    assert episode.outputs["outcome"] == ("answered" if row["answer"] else "truncated" if row["truncated"] else "no answer")
    turns = _children(trace, episode)
    assert [t.name for t in turns] == [f"turn {i}" for i in range(1, row["turns"] + 1)]
    assert all(t.span_type == "CHAIN" for t in turns)
    assert turns[0].inputs["observation"][0]["content"] == episode.inputs["query"]  # the first turn sees the task

    said = [m["content"] for m in messages if m["role"] == "assistant"]
    observed = [m["content"] for m in messages if m["role"] == "tool"]
    calls = [json.loads(c) for c in row["calls"] if json.loads(c)["kind"] != "invalid"]
    llm, tools = [], []
    for turn in turns:
        inside = _children(trace, turn)
        assert inside[0].span_type == "LLM" and all(s.span_type == "TOOL" for s in inside[1:])
        assert inside[0].inputs["prompt_messages"] >= 2 and inside[0].inputs["prompt_chars"] > 0
        llm.append(inside[0].outputs)
        tools += inside[1:]
    assert llm == said
    # What came of each turn: tool results, the environment's correction of an unparseable turn, or the answer.
    starts = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for turn, start, end in zip(turns, starts, [*starts[1:], len(messages)]):
        after = messages[start + 1 : end]
        if after and after[0]["role"] == "user":
            assert turn.outputs == {"kind": "invalid", "feedback": after[0]["content"]}
        else:
            assert turn.outputs["kind"] == ("tool" if after else "answer" if row["answer"] else "cut")
    assert len(tools) == len(calls) == len(observed)
    for span, call, observation in zip(tools, calls, observed):
        assert span.name == call["name"] and span.inputs == call["arguments"]
        assert span.outputs == {"observation": observation, "kind": call["kind"]}
        assert span.status.status_code == ("OK" if call["kind"] in ("ok", "empty", "repeated") else "ERROR")
    assert SECRET not in trace.to_json()
    return episode


def test_episodes_become_traces_of_the_stage_run(root, travel):
    rows = travel["rows"]
    assert any(json.loads(c)["kind"] == "fault" for r in rows for c in r["calls"])  # failing tool calls show as errors
    with stage_run("infer_teacher", {"teacher": {"seed": 0}}, root) as run:
        ids = log_episode_traces(rows, limit=4)
    traces = _traces(root, run.info.run_id)
    assert [t.info.trace_id for t in traces] == ids and len(ids) == 4
    for trace, row in zip(traces, rows):
        episode = check_episode(trace, row, run.info.run_id)
        assert trace.info.tags["star.stage"] == "infer_teacher"
        assert episode.outputs["success"] == row["success"] and episode.outputs["plan"] == row["plan"]


def test_the_trace_count_is_capped(root, travel, monkeypatch):
    import star.tracking

    rows = travel["rows"]
    assert log_episode_traces(rows) == []  # no active run: nothing is logged
    monkeypatch.setattr(star.tracking, "TRACE_EPISODES", 2)
    with stage_run("infer@sft", {}, root) as run:
        ids = log_episode_traces(rows)
    assert len(ids) == 2 and len(_traces(root, run.info.run_id)) == 2
    assert star.tracking.TRACE_EPISODES < len(rows)


@pytest.fixture(scope="module")
def tiny(travel):
    """A tiny policy model built from the expert's episodes."""
    from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
    from star.travel.world.synthetic import entity_names

    rows = travel["rows"]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]))
    spec = TinySpec(vocab_size=600, hidden_size=64, num_layers=1, num_heads=2)
    return make_tiny(travel["dir"] / "tiny", corpus, entity_names(travel["sandbox"]), spec)


@pytest.mark.slow
def test_infer_flow_traces_the_policys_episodes(root, travel, tiny, monkeypatch, one_torch_thread):
    import flows.infer
    import star.tracking
    from star.config import EnvParams, InferParams, ModelParams, RunnerParams

    # The flow as the stage runs it.
    monkeypatch.setattr(star.tracking, "TRACE_EPISODES", 3)
    infer = InferParams(max_turns=3, max_new_tokens=24, max_total_tokens=1024, batch_size=6)
    out = root / "infer"
    with stage_run("infer@base", {}, root) as run:
        domain = TravelDomain({"env": EnvParams()}, travel["world"])
        metrics = flows.infer.infer_flow(infer, ModelParams(), RunnerParams(), domain, "base", travel["queries"], tiny, out, out / "report", root / "progress")
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert metrics["episodes"] == len(rows) == 6
    traces = _traces(root, run.info.run_id)
    assert len(traces) == 3
    kinds = set()
    for trace, row in zip(traces, rows):
        episode = check_episode(trace, row, run.info.run_id)
        assert trace.info.tags["star.stage"] == "infer@base" and trace.info.tags["star.policy"] == "base"
        assert "plan" not in episode.outputs  # a policy's plans are judged later, by `evaluate`
        kinds |= {turn.outputs["kind"] for turn in _children(trace, episode)}
    assert "invalid" in kinds  # an untrained policy's turns, corrected by the environment


def _model_of(root, run_id):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri(root))
    outputs = client.get_run(run_id).outputs.model_outputs
    assert len(outputs) == 1  # the run's Models column
    return client, client.get_logged_model(outputs[0].model_id)


@pytest.mark.slow
def test_sft_logs_its_model_without_copying_it(root, travel, tiny, monkeypatch, one_torch_thread):
    import flows.sft
    from star.config import ModelParams, SFTStageParams

    monkeypatch.setattr(flows.sft, "fine_tune", flows.sft.train)  # the task's function, without Prefect
    monkeypatch.chdir(root)
    (root / "data").mkdir()
    (root / "data/train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in travel["rows"][:2]))
    sft = SFTStageParams(max_steps=2, per_device_batch_size=2, max_length=512, logging_steps=1, save_steps=1000)
    with stage_run("sft", {"sft": sft.model_dump(mode="json")}, root) as run:
        metrics = flows.sft.sft_flow.fn(sft, ModelParams(), root / "data/train.jsonl", tiny, root / "models/sft", root / "ckpt", root / "sft.csv")
    client, model = _model_of(root, run.info.run_id)
    assert model.name == "sft" and model.source_run_id == run.info.run_id and model.status == "READY"
    assert model.tags["star.model_path"] == (root / "models/sft").as_posix() and (root / "models/sft/config.json").is_file()
    assert model.tags["star.stage"] == "sft" and model.tags["star.pipeline"] == "exp-a"
    assert model.params["sft.max_steps"] == "2" and model.params["model.name_or_path"] == ModelParams().name_or_path
    assert {m.key: m.value for m in model.metrics} == {k: float(v) for k, v in metrics.items()} and metrics
    # Only MLflow's stub is stored: the weights stay in the stage output.
    stored = [p.name for p in (root / "mlartifacts").rglob("*") if p.is_file()]
    assert "MLmodel" in stored and not any(n.endswith(".safetensors") for n in stored)
    (version,) = client.search_model_versions("name = 'star-sft'")
    assert version.source == f"models:/{model.model_id}" and version.run_id == run.info.run_id


@pytest.mark.slow
def test_grpo_logs_its_model(root, travel, tiny, monkeypatch, one_torch_thread):
    import flows.grpo
    from star.config import EnvParams, GRPOStageParams, ModelParams
    from star.travel.specs import TravelRewardParams

    monkeypatch.setattr(flows.grpo, "reinforce", flows.grpo.train)  # the task's function, without Prefect
    grpo = GRPOStageParams(
        algorithm="grpo",
        num_generations=2,
        queries_per_step=1,
        steps=1,
        max_turns=2,
        max_new_tokens=16,
        max_total_tokens=512,
        temperature=1.0,
        skip_levels=[],
        unseen_queries=False,
        mask_truncated_completions=False,
    )
    (root / "sft.jsonl").write_text("".join(json.dumps({"query_id": r["query_id"]}) + "\n" for r in travel["rows"]))
    out = root / "models/grpo"
    with stage_run("grpo", {}, root) as run:
        domain = TravelDomain({"env": EnvParams(), "reward": TravelRewardParams()}, travel["world"])
        metrics = flows.grpo.grpo_flow.fn(grpo, EnvParams(), ModelParams(), domain, travel["queries"], root / "sft.jsonl", tiny, out, root / "ckpt", root / "grpo.csv")
    client, model = _model_of(root, run.info.run_id)
    assert model.name == "grpo" and model.source_run_id == run.info.run_id and (out / "config.json").is_file()
    assert model.tags["star.model_path"] == out.as_posix() and model.params["grpo.num_generations"] == "2" and "env.row_cap" in model.params
    assert {m.key for m in model.metrics} == {k for k, v in metrics.items() if isinstance(v, (int, float))} and metrics
    assert [v.source for v in client.search_model_versions("name = 'star-grpo'")] == [f"models:/{model.model_id}"]


def test_grpo_and_qa_sft_models_are_named_after_their_stage(root, tmp_path):
    """`log_model` names the model after the run's stage, and a second run of a stage is a new version."""
    (tmp_path / "grpo").mkdir()
    for attempt in (1, 2):
        with stage_run("grpo", {"grpo": {"steps": attempt}}, root) as run:
            model_id = log_model(tmp_path / "grpo", {"grpo": {"steps": attempt}}, {"final_pass_rate": 0.5, "note": "text"})
        client, model = _model_of(root, run.info.run_id)
        assert model.model_id == model_id and model.name == "grpo" and model.params == {"grpo.steps": str(attempt)}
        assert [(m.key, m.value) for m in model.metrics] == [("final_pass_rate", 0.5)]
    assert sorted(int(v.version) for v in client.search_model_versions("name = 'star-grpo'")) == [1, 2]
    with stage_run("qa_sft", {}, root):
        log_model(tmp_path / "grpo", {}, {})
    assert client.search_model_versions("name = 'star-qa_sft'")
    assert log_model(tmp_path / "grpo", {}, {}) is None  # no active run: nothing is logged


def test_a_model_that_cannot_be_logged_warns_and_the_stage_goes_on(root):
    (root / "mlartifacts").write_text("")  # the artifact store cannot be written: MLflow's stub fails
    with stage_run("sft", {}, root) as run, pytest.warns(TrackingWarning, match="model not logged"):
        assert log_model(root / "models/sft", {}, {"loss": 1.0}) is None
    import mlflow

    assert mlflow.MlflowClient(tracking_uri(root)).get_run(run.info.run_id).info.status == "FINISHED"
