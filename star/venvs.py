"""Run on in an interpreter that has vLLM. vLLM's CPU build pins its own transformers, so it lives in
its own venv (.venv-vllm, `make vllm`); a stage or benchmark that needs it starts itself again there."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

VLLM_PYTHON = "STAR_VLLM_PYTHON"  # another interpreter with vLLM, in place of .venv-vllm's


def run_with_vllm(what: str, argv: Sequence[str], root: Path | str = ".") -> None:
    """Return when this interpreter has vLLM; else exec `argv` (the arguments after the interpreter) in
    $STAR_VLLM_PYTHON or root/.venv-vllm's python; with neither, stop with one `error:` line and exit 2."""
    if importlib.util.find_spec("vllm") is not None:
        return
    python = Path(os.environ.get(VLLM_PYTHON, Path(root) / ".venv-vllm" / "bin" / "python")).absolute()
    if not python.is_file():
        print(f"error: {what} needs vLLM, which this interpreter lacks, and there is no {python}: "
              f"`make vllm` builds .venv-vllm (vLLM's CPU build), or install the gpu extra, or set {VLLM_PYTHON}", file=sys.stderr)
        sys.exit(2)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [str(python), *argv])
