import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from star.models.tiny import TAG_TOKENS, TinySpec, make_tiny
from star.train.copy_params import CopySpec
from star.train.copy_pretrain import copy_accuracy, copy_examples, copy_vocabulary, pretrain_copy

NAMES = [f"Town{c}{d}" for c in "ABCDEF" for d in "XYZW"]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    corpus = [f"Day {i}: from {a} to {b}, 2022-03-0{i % 9 + 1}. <think>ok</think>" for i, (a, b) in enumerate(zip(NAMES, NAMES[1:]))]
    out = tmp_path_factory.mktemp("copy") / "base"
    spec = TinySpec(vocab_size=300, hidden_size=128, num_layers=2, num_heads=4, max_position_embeddings=512)
    return make_tiny(out, corpus, NAMES, spec)


def test_vocabulary_is_the_entity_names_and_digits(base_dir):
    tok = AutoTokenizer.from_pretrained(base_dir)
    items, filler = copy_vocabulary(tok)
    names = {tok.decode([i]) for i in items}
    assert names == set(NAMES) | set("0123456789")
    assert not names & set(TAG_TOKENS)
    assert set(items) <= set(filler)


def test_examples_are_deterministic_per_seed_and_mask_only_repeats():
    spec = CopySpec(examples=50, cued_share=0.5, max_filler=20, seed=3)
    items, filler = list(range(10, 40)), list(range(0, 100))
    a, b = copy_examples(items, filler, spec), copy_examples(items, filler, spec)
    assert a == b
    assert a != copy_examples(items, filler, spec.model_copy(update={"seed": 4}))
    for ex in a:
        ids, mask = ex["input_ids"], ex["assistant_masks"]
        assert len(ids) == len(mask) and sum(mask) > 0
        first_target = mask.index(1)
        # every copied token already appeared before the part that copies it
        assert all(ids[i] in ids[: first_target - 1] for i, m in enumerate(mask) if m)
        assert all(ids[i] in items for i, m in enumerate(mask) if m)


@pytest.mark.slow
def test_pretraining_installs_copying(base_dir, tmp_path, one_torch_thread):
    spec = CopySpec(examples=19200, batch_size=32, min_items=6, max_items=12, max_filler=8, learning_rate=2e-3, eval_examples=40)
    metrics = pretrain_copy(str(base_dir), tmp_path / "copy", spec, tmp_path / "ckpt")
    assert metrics["steps"] == 600
    assert metrics["copy_accuracy_before"] < 0.1
    # random items: without copying nothing beats chance (1 in 34); the circuit
    # forms abruptly, so this short run is caught on its way up
    assert metrics["copy_accuracy"] > 0.2, metrics
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "copy")
    tok = AutoTokenizer.from_pretrained(tmp_path / "copy")
    items, filler = copy_vocabulary(tok)
    held = copy_examples(items, filler, spec.model_copy(update={"examples": 20, "seed": 9}))
    assert copy_accuracy(model, held) > 0.2
