"""VLLMBackend for real: vLLM's CPU build, in .venv-vllm (`make vllm`), against the transformers backend.

vLLM pins its own transformers, so it cannot live in .venv; the test runs
bench/vllm_engine.py with .venv-vllm's interpreter and reads its JSON line. A missing
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
