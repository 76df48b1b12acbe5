"""Supervised fine-tuning on teacher trajectories, with TRL's SFTTrainer.

Each row is one conversation (`messages`) with its tool schemas (`tools`, a
JSON string). The loss is on assistant tokens only: TRL renders the chat with
the training variant of the template, whose `{% generation %}` blocks mark
the assistant turns, so system, user and tool-response tokens get no label.

Checkpoints go to `checkpoint_dir` and a rerun resumes from the last one; the
final model (LoRA merged in) lands in `out_dir` in one rename.

Under `accelerate launch` with several processes (DDP, DeepSpeed ZeRO, FSDP) every
process trains on its own share of each batch; only the first one writes files
(checkpoints, the model, the curve) and hands logs to `MetricsCallback`. Token
counts are summed over the processes.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, TrainerCallback
from trl import SFTConfig, SFTTrainer

from star.io import atomic_dir
from star.train.batch_record import digest, record_batch, recording
from star.train.curves import curve, write_curve
from star.train.sft_params import LoraParams, SFTParams

LogFn = Callable[[dict[str, float], int], None]


def _tools(row: dict[str, Any]) -> list[dict[str, Any]] | None:
    tools = row.get("tools")
    return json.loads(tools) if isinstance(tools, str) else tools


def count_tokens(tokenizer: PreTrainedTokenizerBase, row: dict[str, Any]) -> int:
    """Tokens of the whole rendered conversation, tool schemas included."""
    ids = tokenizer.apply_chat_template(row["messages"], tools=_tools(row), tokenize=True, return_dict=False)
    return len(ids)


def to_dataset(rows: Sequence[dict[str, Any]]) -> Dataset:
    """Conversations as TRL reads them.

    `tools` stays a JSON string, which TRL decodes per example: as a column of
    structs, datasets would merge the argument keys of all tools into one
    type and render every schema with the other tools' arguments as nulls.
    """
    records = []
    for row in rows:
        tools = row.get("tools")
        if tools is not None and not isinstance(tools, str):
            tools = json.dumps(tools)
        records.append({"messages": row["messages"], "tools": tools})
    return Dataset.from_list(records)


class _Trainer(SFTTrainer):
    """SFTTrainer that also counts the tokens it trains on and adds them to every log."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tokens_seen = 0
        self.assistant_tokens_seen = 0

    def training_step(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        mask = inputs.get("attention_mask")
        self.tokens_seen += int(mask.sum()) if mask is not None else inputs["input_ids"].numel()
        self.assistant_tokens_seen += int((inputs["labels"] != -100).sum())
        self._record(inputs)
        return super().training_step(model, inputs, *args, **kwargs)

    def _record(self, inputs: dict[str, Any]) -> None:
        """Record {step, sequences: [digest of each sequence's tokens]} for this process (star.train.batch_record)."""
        if not recording():
            return
        mask = inputs.get("attention_mask")
        rows = inputs["input_ids"].tolist()
        digests = [digest(ids if mask is None else [t for t, m in zip(ids, mask[i].tolist()) if m]) for i, ids in enumerate(rows)]
        record_batch(self.args.process_index, self.state.global_step, "sequences", digests)

    def token_counts(self) -> tuple[int, int]:
        """(tokens, assistant tokens) trained on so far, by all processes together.

        With several processes every one of them must call this at the same point.
        """
        if self.accelerator.num_processes == 1:
            return self.tokens_seen, self.assistant_tokens_seen
        counts = torch.tensor([self.tokens_seen, self.assistant_tokens_seen], device=self.accelerator.device)
        tokens, assistant = self.accelerator.reduce(counts, "sum").tolist()
        return tokens, assistant

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        # every process logs at the same steps, so the counts can be summed here
        if self.model.training:
            logs["train_tokens"], logs["assistant_tokens"] = self.token_counts()
        super().log(logs, start_time)


class MetricsCallback(TrainerCallback):
    """Hands every log (loss, learning rate, grad norm, throughput) to `log_fn(metrics, step)`,
    in the first process only when several train together.

    Throughput is measured between two logs from the token counts the trainer
    adds to its logs: all non-padding tokens, and the assistant tokens that
    carry the loss.
    """

    def __init__(self, log_fn: LogFn):
        self.log_fn = log_fn
        self._last: tuple[float, int, int] | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._last = (time.perf_counter(), 0, 0)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        logs = logs or {}
        metrics = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if "loss" in logs and "train_tokens" in logs and self._last is not None:
            now = time.perf_counter()
            then, tokens, assistant = self._last
            elapsed = max(now - then, 1e-9)
            metrics["tokens_per_second"] = (logs["train_tokens"] - tokens) / elapsed
            metrics["assistant_tokens_per_second"] = (logs["assistant_tokens"] - assistant) / elapsed
            self._last = (now, logs["train_tokens"], logs["assistant_tokens"])
        if metrics:
            self.log_fn(metrics, state.global_step)


class _LastLoss(TrainerCallback):
    def __init__(self) -> None:
        self.loss: float | None = None

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.loss = float(logs["loss"])


def _split(rows: list[dict[str, Any]], fraction: float, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if fraction <= 0:
        return rows, []
    if len(rows) < 2:
        raise ValueError(f"eval_fraction={fraction} needs at least 2 rows, got {len(rows)}")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_eval = min(max(1, round(fraction * len(rows))), len(rows) - 1)
    held = set(order[:n_eval])
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


def sft_config(params: SFTParams, checkpoint_dir: Path, has_eval: bool) -> SFTConfig:
    cpu = not torch.cuda.is_available()
    # transformers 5.24 renamed gradient_checkpointing; .venv-vllm's (vLLM pins <5.20) has the old name only.
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in SFTConfig.__dataclass_fields__ else "gradient_checkpointing"
    return SFTConfig(
        output_dir=str(checkpoint_dir),
        learning_rate=params.learning_rate,
        num_train_epochs=params.num_epochs,
        max_steps=params.max_steps or -1,
        per_device_train_batch_size=params.per_device_batch_size,
        per_device_eval_batch_size=params.per_device_batch_size,
        gradient_accumulation_steps=params.gradient_accumulation_steps,
        max_length=params.max_length,
        warmup_steps=params.warmup_ratio,  # a float below 1 is a fraction of the total steps
        weight_decay=params.weight_decay,
        lr_scheduler_type=params.lr_scheduler,
        bf16=params.bf16,
        **{checkpointing: params.gradient_checkpointing, f"{checkpointing}_kwargs": {"use_reentrant": False} if params.gradient_checkpointing else None},
        packing=params.packing,
        logging_steps=params.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=params.save_steps,
        save_total_limit=params.save_total_limit,
        eval_strategy="steps" if has_eval else "no",
        eval_steps=params.save_steps if has_eval else None,
        seed=params.seed,
        data_seed=params.seed,
        assistant_only_loss=True,
        use_cpu=cpu,
        report_to=[],  # the caller logs to MLflow through callbacks
    )


def _lora_config(lora: LoraParams) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        task_type="CAUSAL_LM",
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
    )


def make_trainer(
    model_path: str,
    rows: list[dict[str, Any]],
    params: SFTParams,
    checkpoint_dir: Path,
    callbacks: Sequence[TrainerCallback] = (),
) -> SFTTrainer:
    """The SFTTrainer for `rows`, with its dataset tokenized and labelled."""
    if not rows:
        raise ValueError("no rows to train on")
    train_rows, eval_rows = _split(list(rows), params.eval_fraction, params.seed)
    # The config comes first: under DeepSpeed ZeRO-3 it makes the model load already sharded.
    args = sft_config(params, Path(checkpoint_dir), bool(eval_rows))
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    # fp32 master weights whatever the checkpoint's dtype; bf16 is autocast on top.
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return _Trainer(
        model=model,
        args=args,
        train_dataset=to_dataset(train_rows),
        eval_dataset=to_dataset(eval_rows) if eval_rows else None,
        processing_class=tokenizer,
        peft_config=_lora_config(params.lora) if params.lora.enabled else None,
        callbacks=list(callbacks),
    )


def train_sft(
    model_path: str,
    rows: list[dict[str, Any]],
    out_dir: Path,
    params: SFTParams,
    checkpoint_dir: Path,
    callbacks: Sequence[TrainerCallback] = (),
    curve_path: Path | None = None,
) -> dict[str, float]:
    """Fine-tune `model_path` (a directory or a hub id) on `rows`; write the result to `out_dir`.

    Resumes from the last checkpoint in `checkpoint_dir` when there is one.
    `curve_path` gets the loss curve as CSV.
    """
    out_dir, checkpoint_dir = Path(out_dir), Path(checkpoint_dir)
    last_loss = _LastLoss()
    trainer = make_trainer(model_path, rows, params, checkpoint_dir, [last_loss, *callbacks])

    main = trainer.is_world_process_zero()  # the process that writes files
    sharded = trainer.is_fsdp_enabled or (trainer.is_deepspeed_enabled and trainer.accelerator.state.deepspeed_plugin.zero_stage == 3)
    if sharded and params.lora.enabled:
        raise ValueError("LoRA cannot be merged into weights sharded by FSDP or ZeRO-3; train it with DDP or ZeRO-2")

    resume = last_checkpoint(checkpoint_dir)
    for partial in [p for p in _checkpoints(checkpoint_dir) if not _complete(p)] if main else []:
        shutil.rmtree(partial)  # nothing to resume from, and it would upset checkpoint rotation
    threads = torch.get_num_threads()
    if params.cpu_threads and trainer.args.use_cpu:
        torch.set_num_threads(params.cpu_threads)
    try:
        start = time.perf_counter()
        result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        wall = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)

    tokens, assistant_tokens = trainer.token_counts()
    metrics: dict[str, float] = {
        "train_loss": last_loss.loss if last_loss.loss is not None else float(result.training_loss),
        "train_loss_mean": float(result.training_loss),
        "steps": trainer.state.global_step,
        "resumed_from_step": _step_of(resume) if resume else 0,
        "train_tokens": tokens,
        "assistant_tokens": assistant_tokens,
        "tokens_per_second": tokens / wall if wall > 0 else math.nan,
        "assistant_tokens_per_second": assistant_tokens / wall if wall > 0 else math.nan,
        "wall_seconds": wall,
    }
    if trainer.eval_dataset is not None:
        metrics["eval_loss"] = float(trainer.evaluate()["eval_loss"])

    model, state_dict = trainer.model, None
    if sharded:  # every process joins in gathering the whole weights
        state_dict = trainer.accelerator.get_state_dict(trainer.model_wrapped)
        model = trainer.accelerator.unwrap_model(trainer.model)
    if not main:
        return metrics
    if params.lora.enabled:
        model = model.merge_and_unload()  # a plain model: later stages need no peft
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, state_dict=state_dict)
        trainer.processing_class.save_pretrained(tmp)
    if curve_path is not None:
        write_curve(curve_path, curve(trainer.state.log_history, "loss"))
    return metrics


def _step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("-", 1)[1])


def _checkpoints(checkpoint_dir: Path) -> list[Path]:
    if not checkpoint_dir.is_dir():
        return []
    return [p for p in checkpoint_dir.glob("checkpoint-*") if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()]


def _complete(checkpoint: Path) -> bool:
    # The trainer writes a checkpoint in place with trainer_state.json last,
    # so a directory without it is a save that was cut short.
    return (checkpoint / "trainer_state.json").is_file()


def last_checkpoint(checkpoint_dir: Path) -> Path | None:
    """The newest complete `checkpoint-N` in `checkpoint_dir`, if any."""
    return max((p for p in _checkpoints(Path(checkpoint_dir)) if _complete(p)), key=_step_of, default=None)
