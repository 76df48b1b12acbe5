"""Generated tokens per second: the batched multi-turn engine against plain `model.generate`.

Both play TravelEnv episodes, sampling with a fixed seed. `--model tiny` (the
default) is the built-in tiny model at the pipeline's default size, randomly
initialised, so every turn runs to its token limit; `--model smollm2` is
SmolLM2-135M-Instruct (builtin:smollm2, the tools' schemas in its prompt),
which has never seen the task, so most turns run to the limit too. The engine
plays all episodes at once; the baseline plays them one by one, re-rendering
the conversation and calling `model.generate` with batch 1 every turn. The
baseline runs on the first few episodes only, to keep the benchmark short;
tokens per second is a rate, so the two compare directly. `generate_batch`
is one `model.generate` call on every episode's first prompt at once (left
padded, no stop strings): the batched rate plain transformers reaches.

Both run on torch's default threads (one per core), as the pipeline's
stages do; on a busy machine `--threads 1` is steadier.

The compute ceiling is measured in the same run: fp32 matmul GFLOP/s at the
decode shape (32 rows through the MLP's first matrix) and at 1024^3, on the
same threads, against the model's FLOPs (2 per weight of every linear layer,
plus 4 * layers * hidden * context for attention). `ceiling_tokens_per_s`
counts the generated tokens only; `floor_s` also counts the prompt and
observation tokens the engine has to prefill (the shared prefix once), the
work no engine can skip.

Usage: python bench/rollout.py [--model tiny|smollm2] [--episodes 32] [--baseline-episodes 6] [--turns 4] [--new-tokens 48] [--threads N]
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from common import matmul_gflops, token_flops

from star.agent.hf_backend import TransformersBackend
from star.agent.prefix_cache import common_prefix
from star.agent.rollout import STOP_STRINGS, RolloutLimits, Trajectory, run_episodes
from star.models.tiny import TinySpec, build_model, corpus_from_trajectories, train_tokenizer
from star.travel.env import TravelEnv
from star.travel.planner.distill import ExpertTeacher, run_episode
from star.travel.planner.expert import Expert
from star.travel.specs import SynthesisSpec, WorldSpec
from star.travel.world.sandbox_index import index_for
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import entity_names, generate_world
from star.travel.world.tools import TravelTools


def setup(episodes: int, kind: str):
    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": episodes, "validation": 0, "test": 0})).run()["train"]
    tools = TravelTools(world)
    index = index_for(world)
    rows = [
        run_episode(ExpertTeacher(Expert()), tools, index, q, 0, seed=0, max_turns=30, fault_rate=0.0)
        for q in queries[:30]
    ]
    if kind == "smollm2":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from star.models.smollm2 import make_smollm2

        with tempfile.TemporaryDirectory() as tmp:
            path = make_smollm2(Path(tmp) / "smollm2")
            return queries, tools, AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
    spec = TinySpec()
    corpus = corpus_from_trajectories([r["messages"] for r in rows], TravelEnv(tools).tool_schemas())
    tokenizer = train_tokenizer(corpus, entity_names(world), spec.vocab_size)
    model = build_model(tokenizer, spec.hidden_size, spec.num_layers, spec.num_heads, seed=spec.seed).eval()
    return queries, tools, tokenizer, model


def engine(queries, tools, tokenizer, model, turns: int, new_tokens: int) -> tuple[list[Trajectory], float]:
    envs = [TravelEnv(tools, max_turns=turns, seed=i) for i in range(len(queries))]
    backend = TransformersBackend(model, tokenizer, temperature=1.0, seed=0)
    limits = RolloutLimits(max_turns=turns, max_new_tokens=new_tokens, max_total_tokens=8192)
    start = time.perf_counter()
    trajectories = run_episodes(backend, tokenizer, envs, queries, limits, progress=False)
    return trajectories, time.perf_counter() - start


@torch.inference_mode()
def baseline(queries, tools, tokenizer, model, turns: int, new_tokens: int) -> tuple[int, float]:
    torch.manual_seed(0)
    generated = 0
    start = time.perf_counter()
    for i, query in enumerate(queries):
        env = TravelEnv(tools, max_turns=turns, seed=i)
        env.reset(query)
        while not env.done:
            ids = tokenizer.apply_chat_template(
                env.history, tools=env.tool_schemas(), add_generation_prompt=True, tokenize=True, return_tensors="pt"
            )["input_ids"]
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new_tokens,
                do_sample=True,
                temperature=1.0,
                top_p=1.0,
                top_k=0,
                stop_strings=list(STOP_STRINGS),
                tokenizer=tokenizer,
                pad_token_id=tokenizer.pad_token_id,
            )
            new = out[0, ids.shape[1] :]
            generated += len(new)
            env.step(tokenizer.decode(new, skip_special_tokens=True))
    return generated, time.perf_counter() - start


@torch.inference_mode()
def generate_batch(queries, tools, tokenizer, model, new_tokens: int) -> tuple[int, float]:
    """One batched `model.generate` over every episode's first prompt, left padded."""
    texts = []
    for i, query in enumerate(queries):
        env = TravelEnv(tools, seed=i)
        env.reset(query)
        texts.append(tokenizer.apply_chat_template(env.history, tools=env.tool_schemas(), add_generation_prompt=True, tokenize=False))
    tokenizer.padding_side = "left"
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(0)
    start = time.perf_counter()
    out = model.generate(**batch, max_new_tokens=new_tokens, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id)
    seconds = time.perf_counter() - start
    new = out[:, batch["input_ids"].shape[1] :]
    return int((new != tokenizer.pad_token_id).sum()), seconds


def work(model, trajectories: Sequence[Trajectory]) -> tuple[float, float]:
    """FLOPs of (the generated tokens, every token the engine must run), each token at its own context."""
    per_token = token_flops(model)
    shared = len(common_prefix([t.token_ids for t in trajectories]))
    everything, generated = float(sum(per_token(i) for i in range(shared))), 0.0
    for t in trajectories:
        start = len(t.prompt_ids)
        for i in range(shared, len(t.token_ids)):
            cost = per_token(i)
            everything += cost
            if i >= start and t.completion_mask[i - start]:
                generated += cost
    return generated, everything


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--baseline-episodes", type=int, default=6)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    queries, tools, tokenizer, model = setup(args.episodes, args.model)
    queries = queries[: args.episodes]
    trajectories, seconds = engine(queries, tools, tokenizer, model, args.turns, args.new_tokens)
    tokens = sum(sum(t.completion_mask) for t in trajectories)
    print(f"engine:   {len(queries)} episodes, {tokens} tokens in {seconds:.1f} s")
    base_queries = queries[: args.baseline_episodes]
    base_tokens, base_seconds = baseline(base_queries, tools, tokenizer, model, args.turns, args.new_tokens)
    print(f"baseline: {len(base_queries)} episodes, {base_tokens} tokens in {base_seconds:.1f} s")
    batch_tokens, batch_seconds = generate_batch(queries, tools, tokenizer, model, args.new_tokens)
    print(f"generate: {len(queries)} first prompts at once, {batch_tokens} tokens in {batch_seconds:.1f} s")
    rate, base_rate, batch_rate = tokens / seconds, base_tokens / base_seconds, batch_tokens / batch_seconds

    hidden = model.config.hidden_size
    decode_gflops = matmul_gflops(args.episodes, hidden, model.config.intermediate_size)
    large_gflops = matmul_gflops(1024, 1024, 1024)
    generated_flops, all_flops = work(model, trajectories)
    ceiling = tokens / (generated_flops / (decode_gflops * 1e9))
    floor_s = all_flops / (large_gflops * 1e9)
    print(f"matmul: {decode_gflops:.0f} GFLOP/s at decode shape, {large_gflops:.0f} at 1024^3")
    print(f"work: {generated_flops / tokens / 1e6:.2f} MFLOP per generated token; {all_flops / 1e9:.1f} GFLOP with prefill")
    result = {
        "model": args.model,
        "tokens_per_s": round(rate, 1),
        "baseline_tokens_per_s": round(base_rate, 1),
        "ratio": round(rate / base_rate, 2),
        "generate_batch_tokens_per_s": round(batch_rate, 1),
        "ratio_to_generate_batch": round(rate / batch_rate, 2),
        "decode_matmul_gflops": round(decode_gflops, 1),
        "large_matmul_gflops": round(large_gflops, 1),
        "ceiling_tokens_per_s": round(ceiling),
        "percent_of_ceiling": round(100 * rate / ceiling, 1),
        "floor_s": round(floor_s, 3),
        "engine_s": round(seconds, 3),
        "floor_over_engine": round(floor_s / seconds, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
