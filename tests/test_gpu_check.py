"""scripts/gpu_check.sh on CPU: the same SFT and GRPO path as on a GPU, with a tiny model."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

NUMBERS = (
    "params_m", "vocab", "tokenizer_tokens",
    "sft_steps", "sft_batch", "sft_tokens_per_s", "sft_tokens_per_s_overall", "sft_step_s", "sft_wall_s", "sft_peak_mem_gib",
    "grpo_steps", "grpo_episodes_per_step", "grpo_step_s", "grpo_first_step_s", "grpo_generation_s",
    "grpo_generated_tokens_per_s", "grpo_train_tokens_per_s", "grpo_peak_mem_gib", "peak_mem_gib", "total_s",
)


def _load_module():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_cpu_small_mode_prints_one_json_line_of_positive_figures(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "STAR_WHEELS": str(tmp_path / "no-wheels")}
    out = tmp_path / "result.json"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--small", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    last = proc.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    assert json.loads(out.read_text()) == result

    missing = [k for k in NUMBERS if k not in result]
    assert not missing, f"missing keys {missing} in {last}"
    not_positive = {k: result[k] for k in NUMBERS if not (isinstance(result[k], (int, float)) and result[k] > 0)}
    assert not not_positive, f"not positive: {not_positive}"
    assert result["device"] == "cpu" and result["small"] is True and result["dtype"] == "bf16"
    assert result["memory"] == "ru_maxrss"
    assert result["sft_steps"] == 3 and result["grpo_steps"] == 2
    assert result["installed"] == []  # everything is importable here: nothing to install
    assert result["vocab"] >= result["tokenizer_tokens"]
    assert result["grpo_vllm"].startswith("not run") and 0 <= result["grpo_mismatch_abs"] < 1e-2


@pytest.mark.slow
def test_the_vllm_rollouts_run_where_vllm_is_importable(tmp_path):
    """In .venv-vllm the check runs GRPO a second time with backend vllm and reports its steps and mismatch."""
    python = ROOT / ".venv-vllm" / "bin" / "python"
    assert python.is_file(), f"no {python}: build vLLM's venv with `make vllm`"
    env = {**os.environ, "PYTHON": str(python), "STAR_WHEELS": str(tmp_path / "no-wheels")}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--small"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "grpo_vllm" not in result and result["grpo_vllm_step_s"] > 0 and result["grpo_vllm_generation_s"] > 0
    # bf16 on both sides, different kernels: a mismatch, but a small one.
    assert 0 < result["grpo_vllm_mismatch_abs"] < 0.5 and result["grpo_vllm_mismatch_max_ratio"] > 1


def test_missing_packages_without_wheels_say_how_to_get_them(tmp_path):
    gpu_check = _load_module()
    assert gpu_check.ensure_packages(tmp_path, ("json",)) == []  # importable: nothing to do, no wheels needed
    with pytest.raises(SystemExit, match="no_such_module_for_gpu_check not importable and no wheels in .*make gpu-wheels"):
        gpu_check.ensure_packages(tmp_path, ("no_such_module_for_gpu_check",))
