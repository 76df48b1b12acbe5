"""A real pretrained model through the pipeline: SmolLM2-135M-Instruct (builtin:smollm2), the
profile params.smollm2.yaml stacked on the micro profile, as a DVC experiment in a fresh git repo.

The whole DAG on it takes about half an hour on 2 CPU cores (`make smollm2`), so this test runs
the QA domain's chain, the cheaper one, which takes every real-model path: the GGUF conversion,
native tool schemas, LoRA SFT merged into the model, GRPO, and both baselines on the base model.
"""

import json
from pathlib import Path

import pytest
from pipeline_repo import exp_run, mlflow_runs, new_repo

pytestmark = pytest.mark.slow
PROFILES = ("params.micro.yaml", "params.smollm2.yaml")
POLICIES = ("qa_grpo", "naive_rag", "base_tool_call")


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = new_repo(tmp_path_factory.mktemp("smollm2"), PROFILES)
    exp_run(repo, PROFILES, " ".join(f"qa_infer@{p}" for p in POLICIES))
    return repo


def test_every_model_stage_holds_a_llama_with_a_training_chat_template(repo):
    for model in ("qa/base", "qa/sft", "qa/grpo"):
        directory = repo / "models" / model
        config = json.loads((directory / "config.json").read_text())
        assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30, model
        assert not (directory / "adapter_config.json").exists(), f"{model}: LoRA adapters must be merged into the saved model"
        assert "<tool_call>" in (directory / "chat_template.jinja").read_text(), model


def test_sft_trained_lora_adapters_on_the_native_tool_prompt(repo):
    (run,) = [r for r in mlflow_runs(repo) if r.data.tags.get("star.stage") == "qa_sft"]
    assert run.data.params["sft.lora.enabled"] == "True" and run.data.params["model.tool_schemas"] == "True"
    assert run.data.metrics["train_loss"] > 0
    row = json.loads((repo / "data/qa/sft/train.jsonl").read_text().splitlines()[0])
    assert [tool["function"]["name"] for tool in json.loads(row["tools"])] == ["Search"]


def test_the_policy_and_both_baselines_are_scored(repo):
    for policy in POLICIES:
        rows = [json.loads(line) for line in (repo / f"data/qa/infer/{policy}/trajectories.jsonl").read_text().splitlines()]
        assert len(rows) == 4, policy  # the profile's test split
        metrics = json.loads((repo / f"reports/qa/{policy}/metrics.json").read_text())
        assert 0.0 <= metrics["em"] <= metrics["f1"] <= 1.0, policy
        if policy == "naive_rag":  # answers in one turn from retrieved passages; the others may search
            assert all(row["turns"] == 1 for row in rows)
