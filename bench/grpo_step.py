"""Seconds per GRPO step, split into generation, scoring and the update.

One step is 4 queries x 8 generations = 32 TravelEnv episodes, played by the
rollout engine, scored by the evaluator, then one TRL GRPOTrainer update. The
model is the default's shape (hidden 128, 2 layers), randomly initialised, so
every turn runs to its token limit (4 turns of 48 tokens here). The first step
pays for warm-up and is left out of the figures. The ratio compares the step
with its generation alone, measured in the same steps: how much the trainer
adds on top of the rollouts.

The update's floor is its arithmetic at this machine's matmul speed, measured
in the same run: a forward and a backward pass (3 forwards' FLOPs) over 32
episodes the engine plays with the same limits, every token at its own
context, at the GFLOP/s of a 1024^3 fp32 matmul. It runs on torch's default
threads (one per core), as the GRPO stage does.

Usage: python bench/grpo_step.py [--steps 3] [--turns 4] [--new-tokens 48] [--threads N]
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import csv
import json
import tempfile
from pathlib import Path

import torch
from common import matmul_gflops, token_flops
from transformers import AutoModelForCausalLM, AutoTokenizer

from star.agent import RolloutLimits, TransformersBackend, run_episodes
from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
from star.train.grpo import train_grpo
from star.train.grpo_params import GRPOParams
from star.travel.distill import ExpertTeacher, run_episode
from star.travel.env import SYSTEM_PROMPT, TravelEnv
from star.travel.expert import Expert
from star.travel.rewards import Scorer
from star.travel.sandbox_index import index_for
from star.travel.specs import SynthesisSpec, WorldSpec
from star.travel.synthesize import Synthesizer
from star.travel.synthetic import entity_names, generate_world
from star.travel.tools import TravelTools


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": 64, "validation": 0, "test": 0})).run()["train"]
    tools, index = TravelTools(world), index_for(world)
    rows = [run_episode(ExpertTeacher(Expert()), tools, index, q, 0, seed=0, max_turns=30, fault_rate=0.0) for q in queries[:30]]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], TravelEnv(tools).tool_schemas())
    params = GRPOParams(
        algorithm="grpo", steps=args.steps, num_generations=8, queries_per_step=4, max_turns=args.turns, max_new_tokens=args.new_tokens,
        max_total_tokens=4096, save_steps=10_000, skip_levels=[],
    )
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny(Path(tmp) / "model", corpus, entity_names(world), TinySpec(hidden_size=128, num_layers=2, num_heads=4))
        curve = Path(tmp) / "curve.csv"
        train_grpo(
            params, str(model), queries, lambda q: q.query, lambda q, seed: TravelEnv(tools, max_turns=args.turns, seed=seed + q.idx),
            Scorer(index, params), SYSTEM_PROMPT, Path(tmp) / "out", Path(tmp) / "ckpt", curve_path=curve,
        )
        steps = list(csv.DictReader(curve.open()))[1:]  # the first step warms up

        tokenizer, policy = AutoTokenizer.from_pretrained(model), AutoModelForCausalLM.from_pretrained(model)
        envs = [TravelEnv(tools, max_turns=args.turns, seed=i) for i in range(32)]
        limits = RolloutLimits(max_turns=args.turns, max_new_tokens=args.new_tokens, max_total_tokens=4096)
        group = [q for q in queries[:4] for _ in range(8)]
        episodes = run_episodes(TransformersBackend(policy.eval(), tokenizer, seed=0), tokenizer, envs, group, limits, progress=False)
        per_token = token_flops(policy)
        flops = 3 * sum(per_token(i) for t in episodes for i in range(len(t.token_ids)))
    floor = flops / (matmul_gflops(1024, 1024, 1024) * 1e9)
    mean = lambda key: sum(float(s[key]) for s in steps) / len(steps)  # noqa: E731
    step, generation, scoring = mean("step_time"), mean("rollout_generation_seconds"), mean("rollout_scoring_seconds")
    tokens = mean("rollout_completion_tokens") * params.num_generations * params.queries_per_step
    update = step - generation - scoring
    print(f"{len(steps)} steps of 32 episodes: {step:.2f} s each; generation {generation:.2f} s, scoring {scoring:.2f} s")
    print(f"the update's arithmetic: {flops / 1e9:.0f} GFLOP, {floor:.2f} s at this machine's matmul speed")
    result = {
        "seconds_per_step": round(step, 3),
        "generation_s": round(generation, 3),
        "scoring_s": round(scoring, 3),
        "update_s": round(update, 3),
        "update_floor_s": round(floor, 3),
        "update_over_floor": round(update / floor, 2),
        "generated_tokens_per_s": round(tokens / generation, 1),
        "step_over_generation": round(step / generation, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
