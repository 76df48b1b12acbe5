"""Generated tokens per second: the batched multi-turn engine against plain `model.generate`.

Both play TravelEnv episodes with the built-in tiny model (hidden 256, 4
layers, randomly initialised, so every turn runs to its token limit),
sampling with a fixed seed. The engine plays all episodes at once; the
baseline plays them one by one, re-rendering the conversation and calling
`model.generate` with batch 1 every turn. The baseline runs on the first few
episodes only, to keep the benchmark short; tokens per second is a rate, so
the two compare directly.

Both run on one thread by default: at this size two OpenMP threads gain
little, and on a busy machine they stall on each other at every op.

Usage: python bench/rollout.py [--episodes 32] [--baseline-episodes 6] [--turns 4] [--new-tokens 48] [--threads 1]
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import json
import time

import torch

from star.agent import STOP_STRINGS, RolloutLimits, TransformersBackend, run_episodes
from star.models.tiny import TinySpec, build_model, corpus_from_trajectories, train_tokenizer
from star.travel.distill import ExpertTeacher, run_episode
from star.travel.env import TravelEnv
from star.travel.expert import Expert
from star.travel.sandbox_index import index_for
from star.travel.specs import SynthesisSpec, WorldSpec
from star.travel.synthesize import Synthesizer
from star.travel.synthetic import entity_names, generate_world
from star.travel.tools import TravelTools


def setup(episodes: int):
    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": episodes, "validation": 0, "test": 0})).run()["train"]
    tools = TravelTools(world)
    index = index_for(world)
    rows = [
        run_episode(ExpertTeacher(Expert()), tools, index, q, 0, seed=0, max_turns=30, fault_rate=0.0)
        for q in queries[:30]
    ]
    spec = TinySpec(hidden_size=256, num_layers=4)
    corpus = corpus_from_trajectories([r["messages"] for r in rows], TravelEnv(tools).tool_schemas())
    tokenizer = train_tokenizer(corpus, entity_names(world), spec.vocab_size)
    model = build_model(tokenizer, spec.hidden_size, spec.num_layers, spec.num_heads, seed=spec.seed).eval()
    return queries, tools, tokenizer, model


def engine(queries, tools, tokenizer, model, turns: int, new_tokens: int) -> tuple[int, float]:
    envs = [TravelEnv(tools, max_turns=turns, seed=i) for i in range(len(queries))]
    backend = TransformersBackend(model, tokenizer, temperature=1.0, seed=0)
    limits = RolloutLimits(max_turns=turns, max_new_tokens=new_tokens, max_total_tokens=8192)
    start = time.perf_counter()
    trajectories = run_episodes(backend, tokenizer, envs, queries, limits, progress=False)
    elapsed = time.perf_counter() - start
    return sum(sum(t.completion_mask) for t in trajectories), elapsed


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--baseline-episodes", type=int, default=6)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    queries, tools, tokenizer, model = setup(args.episodes)
    queries = queries[: args.episodes]
    tokens, seconds = engine(queries, tools, tokenizer, model, args.turns, args.new_tokens)
    print(f"engine:   {len(queries)} episodes, {tokens} tokens in {seconds:.1f} s")
    base_queries = queries[: args.baseline_episodes]
    base_tokens, base_seconds = baseline(base_queries, tools, tokenizer, model, args.turns, args.new_tokens)
    print(f"baseline: {len(base_queries)} episodes, {base_tokens} tokens in {base_seconds:.1f} s")
    rate, base_rate = tokens / seconds, base_tokens / base_seconds
    result = {
        "tokens_per_s": round(rate, 1),
        "baseline_tokens_per_s": round(base_rate, 1),
        "ratio": round(rate / base_rate, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
