"""VLLMBackend for real: vLLM's CPU build, in .venv-vllm (`make vllm`), against the transformers backend.

vLLM pins its own transformers, so it cannot live in .venv; the tests run
bench/vllm_engine.py and tests/vllm_grpo.py with .venv-vllm's interpreter and read their JSON lines. A missing
.venv-vllm fails the test rather than skipping it: build it with `make vllm`
(about 5 minutes and 4.6 GB).
"""

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


@pytest.mark.slow
def test_vllm_greedy_tokens_match_transformers():
    assert VENV_PYTHON.is_file(), f"no {VENV_PYTHON}: build vLLM's venv with `make vllm`"
    # 256 new tokens: some prompts end on a stop string, some on eos, the rest at the limit.
    run = subprocess.run(
        [str(VENV_PYTHON), str(ROOT / "bench" / "vllm_engine.py"), "--model", "tiny", "--prompts", "32", "--new-tokens", "256"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["prompts"] == 32 and result["dtype"] == "float32"
    # float32 on both sides: the same greedy tokens, the same ends, log-probabilities equal to rounding.
    assert result["identical"] == 32, result
    assert result["finish_reason_differs"] == 0, result
    assert result["vllm_finish"] == result["transformers_finish"]
    assert result["vllm_finish"]["stop"] > 0 and result["vllm_finish"]["length"] > 0, result
    assert result["max_logprob_diff"] < 1e-3, result
    assert result["vllm_tokens"] == result["transformers_tokens"] > 0
    assert result["vllm_tok_s"] > 0 and result["transformers_tok_s"] > 0


@pytest.mark.slow
def test_grpo_on_vllm_syncs_weights_every_step_and_resumes():
    """GRPO with backend vllm on the tiny model (tests/vllm_grpo.py says what each figure means)."""
    assert VENV_PYTHON.is_file(), f"no {VENV_PYTHON}: build vLLM's venv with `make vllm`"
    run = subprocess.run([str(VENV_PYTHON), str(ROOT / "tests" / "vllm_grpo.py")], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["steps"] == 3 and len(result["mismatch_abs"]) == 3
    # Synced before every step's rollouts: float32 sampler and trainer agree to rounding (unsynced: ~1 from step 2 on).
    assert max(result["mismatch_abs"]) < 1e-3 and max(result["mismatch_max_ratio"]) < 1.01 and max(result["mismatch_kl"]) < 1e-5, result
    # Trained weights pushed in place: vLLM's greedy tokens are those of the saved model, and not the start's.
    assert result["synced_equal_transformers"] == result["prompts"] == 16, result
    assert result["synced_differ_from_start"] > 0, result
    assert result["checkpoints_after_kill"] == ["checkpoint-1"] and result["trained_moved"]
    assert result["resumed_equal_whole"], "the resumed run's weights differ from the uninterrupted run's"


@pytest.mark.slow
def test_the_engine_starts_in_a_process_that_holds_the_qa_search_index():
    """QA's GRPO on vLLM imports the BM25 index first; bm25s loads numba where installed (.venv-vllm),
    and numba's LLVM bindings made vLLM's CPU engine fail at start (its kernel rebinding scans every module)."""
    assert VENV_PYTHON.is_file(), f"no {VENV_PYTHON}: build vLLM's venv with `make vllm`"
    bench = ROOT / "bench" / "vllm_engine.py"
    script = (
        "import runpy, sys\n"
        "import star.qa.search\n"
        "assert 'llvmlite' not in sys.modules, 'bm25s loaded numba'\n"
        f"sys.argv = [{str(bench)!r}, '--model', 'tiny', '--prompts', '2', '--new-tokens', '8']\n"
        f"runpy.run_path({str(bench)!r}, run_name='__main__')\n"
    )
    run = subprocess.run([str(VENV_PYTHON), "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert json.loads(run.stdout.strip().splitlines()[-1])["prompts"] == 2
