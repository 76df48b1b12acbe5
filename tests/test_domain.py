"""A third domain needs only its own module: tests/toy_domain.py through the generic stages, world to inference."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DOMAIN = "tests.toy_domain"
STAGES = ["world", "synthesize", "distill", "base", "filter", "copy", "sft", "grpo"]
POLICIES = ["toy_domain_teacher", "toy_domain_grpo", "closed_book"]  # closed_book: the domain's own baseline
PARAMS = {
    "model": {"tiny": {"vocab_size": 400, "hidden_size": 64, "num_layers": 1, "num_heads": 2}},
    "copy_pretrain": {"examples": 8, "batch_size": 4, "eval_examples": 2},
    "sft": {"max_steps": 2, "per_device_batch_size": 4, "max_length": 512},
    "grpo": {"steps": 1, "num_generations": 2, "queries_per_step": 2, "max_turns": 3, "max_new_tokens": 16, "max_total_tokens": 512, "skip_levels": [], "unseen_queries": False},
    "infer": {"max_turns": 3, "max_new_tokens": 16, "max_total_tokens": 512, "batch_size": 6},
    "phone": {"seed": 3, "filter": {"examples": 12}},  # the domain's own section
}


def test_an_unknown_domain_is_a_clear_error():
    from star.domain import load_domain

    with pytest.raises(ValueError, match="unknown domain 'chess'"):
        load_domain("chess")
    with pytest.raises(ValueError, match="has no DOMAIN"):
        load_domain("star.io")


def test_a_third_domains_section_is_validated_like_any_other(tmp_path):
    from star.config import ParamsError, load_params

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"phone": {"seed": 2, "filter": {"examples": 5}}}))
    assert load_params(path, ["phone"], DOMAIN)["phone"].filter.examples == 5
    path.write_text(yaml.safe_dump({"phone": {"sede": 2}}))
    with pytest.raises(ParamsError, match=r"phone.sede = 2: unknown key \(allowed: seed, filter\)"):
        load_params(path, ["phone"], DOMAIN)
    path.write_text(yaml.safe_dump({"phone": {"filter": {"max_tokens": 4096}}, "sft": {"max_length": 1024}}))
    with pytest.raises(ParamsError, match="phone.filter.max_tokens = 4096 exceeds sft.max_length = 1024"):
        load_params(path, ["phone"], DOMAIN)


@pytest.mark.slow
def test_a_third_domain_runs_the_generic_stages_from_its_module_alone(tmp_path):
    # The project's code in a directory of its own (as a checkout), so each stage can record what it imported.
    for name in ("star", "stages", "flows"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    commands = [f"python -m stages.{stage} {DOMAIN}" for stage in STAGES] + [f"python -m stages.infer {DOMAIN} {p}" for p in POLICIES]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_"))}
    env.update(PATH=f"{BIN}:{env['PATH']}", PYTHONPATH=f"{tmp_path}:{ROOT}", HOME=str(tmp_path), PREFECT_HOME=str(tmp_path / ".prefect"), STAR_RECORD_IMPORTS=str(tmp_path / "imports"))
    script = " && ".join(commands)
    proc = subprocess.run([sys.executable, "-m", "flows.serve", "bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]

    data = tmp_path / "data/toy_domain"
    assert len((data / "tasks/train.jsonl").read_text().splitlines()) == 24
    trajectories = [json.loads(line) for line in (data / "trajectories/trajectories.jsonl").read_text().splitlines()]
    assert len(trajectories) == 24 and all(r["success"] for r in trajectories)
    assert len((data / "sft/train.jsonl").read_text().splitlines()) == 12  # phone.filter.examples
    for model in ("base", "copy", "sft", "grpo"):
        assert (tmp_path / "models/toy_domain" / model).is_dir(), model
    for policy in POLICIES:
        rows = (data / "infer" / policy / "trajectories.jsonl").read_text().splitlines()
        metrics = json.loads((tmp_path / "reports/toy_domain" / policy / "metrics.json").read_text())
        assert len(rows) == 6 and metrics["episodes"] == 6 and 0.0 <= metrics["accuracy"] <= 1.0, policy
    assert json.loads((tmp_path / "reports/toy_domain/toy_domain_teacher/metrics.json").read_text())["accuracy"] == 1.0
    assert (tmp_path / "reports/train/toy_domain_grpo.csv").read_text().startswith("step,")
    # the baseline played the base model without the directory: no observation shows an extension
    closed = [json.loads(line) for line in (data / "infer/closed_book/trajectories.jsonl").read_text().splitlines()]
    assert not any("extension" in m["content"] for r in closed for m in r["messages"] if m["role"] == "tool")

    # No stage loaded either built-in domain's code (their params schemas come with star.config).
    records = list((tmp_path / "imports").iterdir())
    assert len(records) == len(commands)
    for record in records:
        files = record.read_text().split()
        domain_code = [f for f in files if f.startswith(("star/travel/", "star/qa/")) and Path(f).name not in ("__init__.py", "specs.py")]
        stage = record.name.split()[0].removeprefix("stages.")
        assert f"stages/{stage}.py" in files and not domain_code, (record.name, domain_code)


def test_a_generation_backend_in_one_module_plays_a_policy(tmp_path):
    """infer.backend names tests/toy_backend.py; flows.infer makes it and plays the toy domain with it."""
    from flows.infer import play_policy
    from star.config import InferParams, ModelParams
    from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
    from tests.toy_backend import ANSWER
    from tests.toy_domain import SYSTEM, PhoneDomain, PhoneParams

    domain = PhoneDomain({"phone": PhoneParams()}, tmp_path / "world")
    domain.build_world(tmp_path / "world")
    domain.synthesize(tmp_path / "tasks")
    tasks = domain.load_tasks(tmp_path / "tasks/test.jsonl")
    rows = domain.reference_episodes(tasks)
    corpus = corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]), SYSTEM)
    model = make_tiny(tmp_path / "model", corpus, domain.entity_names(), TinySpec(vocab_size=400, hidden_size=64, num_layers=1, num_heads=2))
    infer = InferParams(backend="tests.toy_backend", max_turns=3, max_new_tokens=64, max_total_tokens=1024)
    played = play_policy(infer, ModelParams(), domain, "base", tasks, model)
    assert len(played) == len(tasks) and all(r["answer"] == ANSWER and r["turns"] == 1 and not r["truncated"] for r in played)
    with pytest.raises(ValueError, match="backend"):
        InferParams(backend="no such backend")
