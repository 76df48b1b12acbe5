"""Copy pretraining: dense synthetic copy data that installs induction heads before SFT.

A tiny model trained on trajectories alone memorises which names go with
which city instead of copying them from its context. Copying forms fast when
every target is an exact repeat of something earlier in the context, so this
data is made of such repeats, over the tokens a planner has to copy (entity
names, digits, dates) with filler in between:

- `span`: a run of items, filler, then the same run again (loss on the repeat);
- `cued`: `cue value` pairs, filler, then the same cues each followed by its value
  (loss on the values), the `[cue] X ... [cue] -> X` shape of a query slot
  restated in a thought or a call.

Examples are token ids with a loss mask, deterministic per seed. Training
is TRL's SFTTrainer on them at a constant learning rate: the circuit forms
abruptly after a few hundred steps, and a decaying rate can stop short of it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from star.io import atomic_dir
from star.train.copy_params import CopySpec


def copy_vocabulary(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(items, filler): ids worth copying, and ids to fill with.

    The items are the tokenizer's added tokens that are not markup (the
    built-in model adds every entity name of its world as one token) and the
    digits, from which dates, prices and flight numbers are written.
    """
    markup = set(tokenizer.all_special_tokens) | {t for t in tokenizer.get_added_vocab() if t.startswith("<")}
    items = {i for t, i in tokenizer.get_added_vocab().items() if t not in markup}
    for digit in "0123456789":
        ids = tokenizer.encode(digit, add_special_tokens=False)
        if len(ids) == 1:
            items.add(ids[0])
    special = set(tokenizer.all_special_ids)
    filler = [i for i in range(len(tokenizer)) if i not in special]
    return sorted(items), filler


def copy_examples(items: Sequence[int], filler: Sequence[int], spec: CopySpec) -> list[dict[str, list[int]]]:
    """`spec.examples` sequences as {input_ids, assistant_masks}; mask 1 marks a copied token."""
    if not items or not filler:
        raise ValueError("copy pretraining needs items to copy and filler tokens")
    rng = random.Random(spec.seed)
    out = []
    for _ in range(spec.examples):
        n = rng.randint(spec.min_items, max(spec.min_items, spec.max_items))
        gap = [rng.choice(filler) for _ in range(rng.randint(0, spec.max_filler))]
        lead = [rng.choice(filler) for _ in range(rng.randint(0, 16))]
        if rng.random() < spec.cued_share:
            cues = rng.sample(filler, n) if n <= len(filler) else [rng.choice(filler) for _ in range(n)]
            values = [rng.choice(items) for _ in range(n)]
            first = [t for pair in zip(cues, values) for t in pair]
            order = list(range(n))
            rng.shuffle(order)
            second = [t for j in order for t in (cues[j], values[j])]
            second_mask = [m for _ in order for m in (0, 1)]
        else:
            first = [rng.choice(items) for _ in range(n)]
            second, second_mask = list(first), [0] + [1] * (n - 1)  # the first item has no cue
        ids = lead + first + gap + second
        mask = [0] * (len(lead) + len(first) + len(gap)) + second_mask
        out.append({"input_ids": ids, "assistant_masks": mask})
    return out


def copy_accuracy(model, examples: Sequence[dict[str, list[int]]]) -> float:
    """Share of masked tokens the model predicts exactly (greedy, teacher-forced)."""
    import torch

    hits = total = 0
    model.eval()
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex["input_ids"]])
            pred = model(ids).logits[0, :-1].argmax(-1)
            mask = torch.tensor(ex["assistant_masks"][1:], dtype=torch.bool)
            hits += int((pred[mask] == ids[0, 1:][mask]).sum())
            total += int(mask.sum())
    return hits / total if total else 0.0


def pretrain_copy(model_path: str, out_dir: Path, spec: CopySpec, checkpoint_dir: Path, callbacks: Sequence[Any] = ()) -> dict[str, float]:
    """Train `model_path` on copy data; write it to `out_dir`; return copy accuracy before and after."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    from star.train.sft import SFTParams, sft_config

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    items, filler = copy_vocabulary(tokenizer)
    train = copy_examples(items, filler, spec)
    held = copy_examples(items, filler, spec.model_copy(update={"examples": spec.eval_examples, "seed": spec.seed + 1}))
    before = copy_accuracy(model, held)
    params = SFTParams(
        learning_rate=spec.learning_rate, num_epochs=1, per_device_batch_size=spec.batch_size, warmup_ratio=spec.warmup_ratio,
        lr_scheduler="constant_with_warmup", logging_steps=25, save_steps=10**9, seed=spec.seed,
    )
    args = sft_config(params, Path(checkpoint_dir), has_eval=False)
    args.assistant_only_loss = False  # the data is token ids: its own mask marks the copied tokens
    args.save_strategy = "no"
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(train), processing_class=tokenizer, callbacks=list(callbacks))
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    after = copy_accuracy(trainer.model, held)
    with atomic_dir(Path(out_dir)) as tmp:
        trainer.model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return {
        "copy_accuracy_before": before,
        "copy_accuracy": after,
        "items": len(items),
        "steps": trainer.state.global_step,
        "wall_seconds": wall,
    }
