import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import polars as pl
import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
from star.train.sft import MetricsCallback, SFTParams, count_tokens, make_trainer, train_sft
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.specs import SynthesisSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import entity_names
from star.travel.world.tools import TravelTools

# Short sequences and small batches keep every run a few seconds on two cores.
FAST = dict(
    per_device_batch_size=2,
    max_length=1024,  # the prompt (tool schemas included) and the first assistant turns
    learning_rate=3e-3,
    lr_scheduler="constant",
    warmup_ratio=0.0,
    logging_steps=1,
    save_steps=1000,
)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def rows(synthetic_sandbox):
    spec = SynthesisSpec(sizes={"train": 40, "validation": 0, "test": 0})
    queries = Synthesizer(synthetic_sandbox, spec).run()["train"]
    tools, index = TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)
    teacher = ExpertTeacher(Expert(0.0))
    return [run_episode(teacher, tools, index, q, 0, seed=0, max_turns=16, fault_rate=0.0) for q in queries]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, rows, synthetic_sandbox):
    corpus = corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]))
    spec = TinySpec(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=2)
    return str(make_tiny(tmp_path_factory.mktemp("tiny") / "model", corpus, entity_names(synthetic_sandbox), spec))


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny, rows):
    """30 steps on four conversations, logged every step."""
    root = tmp_path_factory.mktemp("sft")
    logs: list[tuple[int, dict]] = []
    metrics = train_sft(
        tiny,
        rows[:4],
        root / "out",
        SFTParams(max_steps=30, **FAST),
        root / "checkpoints",
        callbacks=[MetricsCallback(lambda m, step: logs.append((step, m)))],
    )
    return dict(out=root / "out", metrics=metrics, logs=logs)


def weights(path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def test_labels_cover_exactly_the_assistant_tokens(tiny, rows, tmp_path):
    row = rows[0]
    trainer = make_trainer(tiny, [row], SFTParams(max_length=4096), tmp_path / "checkpoints")
    batch = trainer.data_collator([trainer.train_dataset[0]])
    ids, labels = batch["input_ids"][0].tolist(), batch["labels"][0].tolist()

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tools = json.loads(row["tools"])
    text = tokenizer.apply_chat_template(row["messages"], tools=tools, tokenize=False)
    # TRL rendered the conversation as the plain template does, tool schemas untouched.
    assert tokenizer.decode(ids) == text
    assert all(json.dumps(schema, ensure_ascii=False) in text for schema in tools)
    assert len(ids) == count_tokens(tokenizer, row)

    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    assert encoded["input_ids"] == ids
    offsets = encoded["offset_mapping"]

    # Character spans the loss may cover: each assistant turn as the template
    # writes it, from the newline after the role to the newline after <|im_end|>.
    assistant, tool, pos = [], [], 0
    for message in row["messages"]:
        if message["role"] == "assistant":
            piece = "<|im_start|>assistant\n" + message["content"] + "<|im_end|>\n"
            start = text.index(piece, pos)
            assistant.append((start + len("<|im_start|>assistant"), start + len(piece)))
        elif message["role"] == "tool":
            piece = "<tool_response>\n" + message["content"] + "\n</tool_response>"
            start = text.index(piece, pos)
            tool.append((start, start + len(piece)))
        else:
            continue
        pos = start + len(piece)
    assert len(assistant) == sum(m["role"] == "assistant" for m in row["messages"]) > 1
    assert tool

    def inside(span, spans):
        return any(lo <= span[0] and span[1] <= hi for lo, hi in spans)

    for token, label, span in zip(ids, labels, offsets, strict=True):
        if inside(span, assistant):
            assert label == token  # every assistant token, <|im_end|> included, is trained
        else:
            assert label == -100, tokenizer.decode([token])
    # Tool observations never carry a label.
    assert not [t for t, lab, s in zip(ids, labels, offsets) if lab != -100 and inside(s, tool)]
    assert sum(lab != -100 for lab in labels) < len(labels) / 2


@pytest.mark.slow
def test_loss_goes_down_and_metrics_are_logged(trained):
    logs = trained["logs"]
    losses = [(step, m["loss"]) for step, m in logs if "loss" in m]
    assert [s for s, _ in losses] == list(range(1, 31))
    first, last = losses[0][1], losses[-1][1]
    assert last < 0.6 * first, (first, last)

    step_logs = [m for _, m in logs if "loss" in m]
    for m in step_logs:
        assert {"learning_rate", "grad_norm", "tokens_per_second", "assistant_tokens_per_second"} <= m.keys()
        assert 0 < m["assistant_tokens_per_second"] < m["tokens_per_second"]

    metrics = trained["metrics"]
    assert metrics["steps"] == 30 and metrics["resumed_from_step"] == 0
    assert metrics["train_loss"] == pytest.approx(last)
    assert 0 < metrics["assistant_tokens"] < metrics["train_tokens"]
    assert metrics["tokens_per_second"] > 0 and metrics["wall_seconds"] > 0


@pytest.mark.slow
def test_saved_model_loads_and_generates(trained, tiny):
    out = trained["out"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    # The chat template is saved as given, so GRPO still recognises it.
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(tiny).chat_template
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Plan a trip."}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    generated = model.generate(**prompt, max_new_tokens=8, do_sample=False)
    assert generated.shape[1] > prompt["input_ids"].shape[1]
    assert not any(p.name.startswith(".tmp-") for p in out.parent.iterdir())


class Interrupt(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 4:
            raise KeyboardInterrupt


@pytest.mark.slow
def test_interrupted_training_resumes_from_the_last_checkpoint(tiny, rows, tmp_path):
    params = SFTParams(**{**FAST, "max_steps": 6, "save_steps": 3})
    data = rows[:4]
    with pytest.raises(KeyboardInterrupt):
        train_sft(tiny, data, tmp_path / "out", params, tmp_path / "checkpoints", callbacks=[Interrupt()])
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("checkpoint-*")) == ["checkpoint-3"]
    assert not (tmp_path / "out").exists()
    # A save cut short leaves a checkpoint without its trainer state: skipped.
    (tmp_path / "checkpoints" / "checkpoint-5").mkdir()
    (tmp_path / "checkpoints" / "checkpoint-5" / "model.safetensors").write_bytes(b"")

    steps: list[int] = []
    metrics = train_sft(
        tiny, data, tmp_path / "out", params, tmp_path / "checkpoints",
        callbacks=[MetricsCallback(lambda m, step: steps.append(step) if "loss" in m else None)],
        curve_path=tmp_path / "curve.csv",
    )
    assert metrics["resumed_from_step"] == 3 and metrics["steps"] == 6
    assert steps == [4, 5, 6]  # continued, not restarted
    # The loss curve is whole: the steps before the interruption come from the checkpoint.
    curve = pl.read_csv(tmp_path / "curve.csv")
    assert curve["step"].to_list() == [1, 2, 3, 4, 5, 6] and curve["loss"].min() > 0
    assert not (tmp_path / "checkpoints" / "checkpoint-5").exists()

    # Same weights as a run that was never interrupted.
    train_sft(tiny, data, tmp_path / "ref", params, tmp_path / "ref-checkpoints")
    resumed, reference = weights(tmp_path / "out"), weights(tmp_path / "ref")
    for name, value in reference.items():
        torch.testing.assert_close(resumed[name], value, rtol=1e-4, atol=1e-5, msg=name)


class Threads(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        self.seen = torch.get_num_threads()


@pytest.mark.slow
def test_lora_trains_and_saves_a_merged_model(tiny, rows, tmp_path):
    params = SFTParams(
        **{**FAST, "max_steps": 4, "eval_fraction": 0.25, "cpu_threads": 1}, lora={"enabled": True, "r": 4, "alpha": 8}
    )
    threads = Threads()
    torch.set_num_threads(2)
    try:
        metrics = train_sft(tiny, rows[:4], tmp_path / "out", params, tmp_path / "checkpoints", callbacks=[threads])
        assert threads.seen == 1 and torch.get_num_threads() == 2  # set for training only
    finally:
        torch.set_num_threads(1)
    assert metrics["steps"] == 4 and metrics["eval_loss"] > 0

    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert "adapter_config.json" not in files and "config.json" in files
    merged, base = weights(tmp_path / "out"), weights(tiny)
    assert merged.keys() == base.keys()  # plain weights, no lora_ parameters
    changed = [n for n in base if not torch.equal(merged[n], base[n])]
    assert changed and all("proj" in n for n in changed)  # only the adapted linears moved


@pytest.mark.slow
def test_a_bf16_step_on_cpu_trains_and_saves_float32_weights(tiny, rows, tmp_path):
    from safetensors import safe_open

    params = SFTParams(**{**FAST, "max_steps": 1}, bf16=True)
    trainer = make_trainer(tiny, rows[:2], params, tmp_path / "probe")
    assert trainer.args.use_cpu and trainer.accelerator.mixed_precision == "bf16"  # autocast, not a bf16 model
    train_sft(tiny, rows[:2], tmp_path / "out", params, tmp_path / "checkpoints")
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}
    trained, base = weights(tmp_path / "out"), weights(tiny)
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "out").dtype == torch.float32
    assert any(not torch.equal(trained[k], base[k]) for k in base)


@pytest.mark.parametrize(
    "bad, field",
    [
        (dict(learning_rate=0), "learning_rate"),
        (dict(max_steps=-1), "max_steps"),
        (dict(cpu_threads=-1), "cpu_threads"),
        (dict(per_device_batch_size=0), "per_device_batch_size"),
        (dict(warmup_ratio=1.0), "warmup_ratio"),
        (dict(lr_scheduler="cosine_restarts"), "lr_scheduler"),
        (dict(eval_fraction=1.0), "eval_fraction"),
        (dict(epochs=3), "epochs"),
        (dict(lora={"enabled": True, "r": 0}), "lora.r"),
        (dict(lora={"target_modules": ["q_proj", "lm_head"]}), "lm_head"),
        (dict(lora={"target_modules": []}), "target_modules"),
    ],
)
def test_params_reject_bad_values(bad, field):
    with pytest.raises(ValidationError) as error:
        SFTParams(**bad)
    assert field in str(error.value)
