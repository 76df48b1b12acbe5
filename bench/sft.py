"""SFT tokens per second: TRL's SFTTrainer (star/train/sft.py) against a minimal PyTorch loop.

Both train the default's shape (hidden 128, 2 layers, randomly initialised)
on the same expert trajectories, for the same number of steps of the same
batch size, learning rate and clipping, with the loss on assistant tokens
only. The plain loop renders each conversation once with the training chat
template TRL uses, pads each batch to its longest row, and runs AdamW. The
figure is non-padding tokens per second of training wall time; its ratio is
TRL over the plain loop, measured one after the other in this run.

Usage: python bench/sft.py [--steps 30] [--batch 8] [--threads 0]
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.chat_template_utils import get_training_chat_template

from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
from star.train.sft import train_sft
from star.train.sft_params import SFTParams
from star.travel.env import TravelEnv
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.specs import SynthesisSpec, WorldSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import entity_names, generate_world
from star.travel.world.tools import TravelTools


def trajectories(n: int) -> tuple[list[dict], list[str], list[str]]:
    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": n, "validation": 0, "test": 0})).run()["train"]
    tools, index = TravelTools(world), index_for(world)
    rows = [run_episode(ExpertTeacher(Expert()), tools, index, q, 0, seed=0, max_turns=16, fault_rate=0.0) for q in queries]
    rows = [{"messages": r["messages"]} for r in rows]
    return rows, corpus_from_trajectories([r["messages"] for r in rows], TravelEnv(tools).tool_schemas()), entity_names(world)


def plain_loop(model_dir: Path, rows: list[dict], steps: int, batch: int, lr: float) -> tuple[int, float]:
    """(non-padding tokens, seconds) of `steps` AdamW steps, assistant-only loss."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).train()
    template = get_training_chat_template(tokenizer)
    encoded = []
    for row in rows:
        out = tokenizer.apply_chat_template(row["messages"], chat_template=template, return_dict=True, return_assistant_tokens_mask=True)
        ids, mask = out["input_ids"], out["assistant_masks"]
        encoded.append((torch.tensor(ids), torch.tensor([t if m else -100 for t, m in zip(ids, mask)])))
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    order, rng, tokens = [], random.Random(0), 0
    start = time.perf_counter()
    for _ in range(steps):
        if len(order) < batch:
            order += rng.sample(range(len(encoded)), len(encoded))
        chosen, order = [encoded[i] for i in order[:batch]], order[batch:]
        longest = max(len(ids) for ids, _ in chosen)
        ids = torch.full((len(chosen), longest), tokenizer.pad_token_id)
        labels = torch.full((len(chosen), longest), -100)
        attention = torch.zeros((len(chosen), longest), dtype=torch.long)
        for i, (x, y) in enumerate(chosen):
            ids[i, : len(x)], labels[i, : len(y)], attention[i, : len(x)] = x, y, 1
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        tokens += int(attention.sum())
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--queries", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    rows, corpus, names = trajectories(args.queries)
    params = SFTParams(max_steps=args.steps, per_device_batch_size=args.batch, save_steps=10**6, logging_steps=args.steps, warmup_ratio=0.0, lr_scheduler="constant")
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny(Path(tmp) / "model", corpus, names, TinySpec())
        plain_tokens, plain_s = plain_loop(model, rows, args.steps, args.batch, params.learning_rate)
        trl = train_sft(str(model), rows, Path(tmp) / "out", params, Path(tmp) / "ckpt")
    plain = plain_tokens / plain_s
    print(f"{args.steps} steps of {args.batch}: TRL {trl['tokens_per_second']:.0f} tokens/s in {trl['wall_seconds']:.1f} s, plain loop {plain:.0f} tokens/s in {plain_s:.1f} s")
    result = {
        "trl_tokens_per_s": round(trl["tokens_per_second"], 1),
        "plain_tokens_per_s": round(plain, 1),
        "trl_over_plain": round(trl["tokens_per_second"] / plain, 3),
        "trl_tokens": int(trl["train_tokens"]),
        "plain_tokens": plain_tokens,
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
