"""star.venvs: a stage or benchmark that needs vLLM starts itself again in .venv-vllm, or says why it cannot."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = """import sys
from star.venvs import run_with_vllm
run_with_vllm("probe", [__file__, *sys.argv[1:]])
import importlib.util
print(sys.executable, importlib.util.find_spec("vllm") is not None, sys.argv[1:])
"""


def run(tmp_path: Path, vllm_python: Path) -> subprocess.CompletedProcess:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {**os.environ, "STAR_VLLM_PYTHON": str(vllm_python)}
    return subprocess.run([sys.executable, str(probe), "--flag", "x"], env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_without_vllm_it_starts_again_in_the_vllm_venv_with_the_same_arguments(tmp_path):
    vllm_python = ROOT / ".venv-vllm" / "bin" / "python"
    assert vllm_python.is_file(), "make vllm builds .venv-vllm"
    proc = run(tmp_path, vllm_python)
    assert proc.returncode == 0, proc.stderr
    executable, has_vllm, args = proc.stdout.split(" ", 2)
    assert has_vllm == "True" and args.strip() == "['--flag', 'x']"
    assert Path(executable).parent == vllm_python.parent


def test_with_no_vllm_anywhere_it_stops_with_one_line(tmp_path):
    proc = run(tmp_path, tmp_path / "missing" / "python")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: probe needs vLLM") and proc.stderr.count("\n") == 1 and "make vllm" in proc.stderr
