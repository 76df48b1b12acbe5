"""GPU check: SFT and GRPO steps of the project's own trainers on a ~100M-parameter Llama, in bf16.

Everything is built offline, with no download: the synthetic travel world and
its queries (star/travel), expert trajectories for SFT, the project's
tokenizer trained on them (star.models.tiny.train_tokenizer, with TRL's Qwen2.5
chat template), and a randomly initialised LlamaForCausalLM from a config
(hidden 768, 12 layers, 12 heads, MLP 2048, tied embeddings: about 110M
parameters). The tokenizer has about a thousand tokens; the embedding is padded
to 32,000 rows, as released models pad theirs, so the LM head costs what a 32k
vocabulary costs. `--arch qwen2` takes the project's own builder
(star.models.tiny.build_model) instead, unpadded.

Then `star.train.sft.train_sft` runs `--sft-steps` steps and
`star.train.grpo.train_grpo` runs `--grpo-steps` multi-turn GRPO steps from the
SFT model (TravelEnv episodes played by the project's rollout engine, scored
by its evaluator). The last line of stdout is one JSON object: tokens per
second, step times (the median over the steps after the first, which warms up)
and peak memory (torch.cuda.max_memory_allocated per phase; on CPU the
process's peak RSS, ru_maxrss).

Where vLLM is importable, the same GRPO runs again with `backend: vllm` (an
engine in this process, synced after every step): its step and generation
times and its sampler/trainer mismatch join the JSON line. The GPU machine
this project is sometimes lent has no vLLM and no network to install it (a
wheel of about 500 MB), so there the line says it was not run.

`--device cpu --small` runs the same code path with a tiny model and a few
short steps, in well under a minute; the tests run it.

A machine without network may lack trl, datasets and the project's own needs
(polars, pydantic, tenacity): when one of them is not importable, it is
installed from the wheels in `--wheels DIR` (default $STAR_WHEELS, else
wheels/), which `make gpu-wheels` downloads on a machine with network.

Usage: python scripts/gpu_check.py [--device cuda|cpu|auto] [--small] [--sft-steps N] [--grpo-steps N] [--arch llama|qwen2] [--fp32] [--wheels DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Modules the check imports that a machine with torch, transformers, accelerate
# and peft may lack; each is also the name of its distribution.
REQUIRED = ("trl", "datasets", "polars", "pydantic", "tenacity")

# One size for the GPU, one for the CPU test; the code path is the same.
SIZES: dict[str, dict[str, int]] = {
    "full": dict(
        hidden=768, layers=12, heads=12, intermediate=2048, vocab=32000, queries=64,
        sft_steps=30, sft_batch=32, max_length=2048,
        grpo_steps=5, generations=8, queries_per_step=4, max_turns=4, max_new_tokens=128, max_total_tokens=4096,
    ),
    "small": dict(
        hidden=64, layers=2, heads=2, intermediate=128, vocab=0, queries=8,
        sft_steps=3, sft_batch=2, max_length=512,
        grpo_steps=2, generations=2, queries_per_step=2, max_turns=2, max_new_tokens=8, max_total_tokens=2048,
    ),
}


def step_seconds(logs: list[tuple[float, dict[str, float]]], start: float) -> list[float]:
    """Seconds between the logs of consecutive GRPO steps, the first counted from `start`."""
    times = [start] + [t for t, m in logs if "train/loss" in m]
    return [b - a for a, b in zip(times, times[1:])]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu", "auto"], default="cuda", help="cuda (fails without a GPU) | cpu | auto: cuda when available")
    parser.add_argument("--small", action="store_true", help="tiny model, few short steps: the CPU test of the same path")
    parser.add_argument("--arch", choices=["llama", "qwen2"], default="llama", help="llama: a LlamaConfig model; qwen2: star.models.tiny.build_model")
    parser.add_argument("--sft-steps", type=int, help="SFT optimiser steps (default: 30, small: 3)")
    parser.add_argument("--grpo-steps", type=int, help="GRPO steps (default: 5, small: 2)")
    parser.add_argument("--fp32", action="store_true", help="train in fp32 instead of bf16 mixed precision")
    parser.add_argument("--wheels", type=Path, default=Path(os.environ.get("STAR_WHEELS", ROOT / "wheels")), help="wheels of missing packages (default: $STAR_WHEELS, else wheels/)")
    parser.add_argument("--no-vllm", action="store_true", help="skip the GRPO run with vLLM rollouts even where vLLM is importable")
    parser.add_argument("--out", type=Path, help="also write the JSON line to this file")
    return parser.parse_args(argv)


def _dist_name(wheel: Path) -> str:
    return wheel.name.split("-")[0].replace("_", "-").lower()


def _installed(dist: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def ensure_packages(wheels: Path, modules: tuple[str, ...] = REQUIRED) -> list[str]:
    """Install the modules that are not importable from the wheels in `wheels`, offline; return their names.

    pip first resolves them against what is installed, and installs from the
    wheels whatever else they need. When the installed packages fall outside
    the wheels' pins (an older pyarrow, a newer fsspec), it installs, without
    dependencies, every wheel whose distribution is not installed at all.
    """
    import importlib
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return []
    files = sorted(Path(wheels).glob("*.whl"))
    if not files:
        raise SystemExit(
            f"gpu_check: {', '.join(missing)} not importable and no wheels in {wheels}/. "
            "On a machine with network run `make gpu-wheels` (writes wheels/), bring wheels/ along, "
            "or name another folder with --wheels DIR or STAR_WHEELS."
        )
    print(f"gpu_check: installing {' '.join(missing)} from {wheels}/", file=sys.stderr, flush=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-cache-dir", "--disable-pip-version-check"]
    if subprocess.run([*pip, "--find-links", str(wheels), *missing]).returncode != 0:
        absent = [str(f) for f in files if not _installed(_dist_name(f))]
        print("gpu_check: pip could not resolve them against the installed packages; installing the absent wheels without dependencies", file=sys.stderr, flush=True)
        if not absent or subprocess.run([*pip, "--no-deps", *absent]).returncode != 0:
            raise SystemExit(f"gpu_check: could not install {', '.join(missing)} from {wheels}/")
    importlib.invalidate_caches()
    still = [m for m in missing if importlib.util.find_spec(m) is None]
    if still:
        raise SystemExit(f"gpu_check: {', '.join(still)} still not importable after installing from {wheels}/")
    return missing


def median_after_first(values: list[float]) -> float:
    """The median of the values after the first (warm-up), or the only value there is."""
    return statistics.median(values[1:] if len(values) > 1 else values)


class PeakMemory:
    """Peak memory of a phase: torch.cuda.max_memory_allocated on a GPU, else the process's peak RSS."""

    def __init__(self, torch: Any, cuda: bool):
        self.torch, self.cuda = torch, cuda
        self.source = "torch.cuda.max_memory_allocated" if cuda else "ru_maxrss"

    def reset(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def gib(self) -> float:
        if self.cuda:
            self.torch.cuda.synchronize()
            peak = self.torch.cuda.max_memory_allocated()
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
        return round(peak / 2**30, 3)


def build_llama(tokenizer: Any, size: dict[str, int], seed: int = 0) -> Any:
    """A randomly initialised LlamaForCausalLM, its embedding padded to `size['vocab']` rows."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from star.models.tiny import IM_END, PAD

    pad_id, eos_id = tokenizer.convert_tokens_to_ids(PAD), tokenizer.convert_tokens_to_ids(IM_END)
    config = LlamaConfig(
        vocab_size=max(size["vocab"], len(tokenizer)),
        hidden_size=size["hidden"],
        intermediate_size=size["intermediate"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["heads"],
        max_position_embeddings=tokenizer.model_max_length,
        tie_word_embeddings=True,
        bos_token_id=pad_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id)
    return model


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the trainers pick the GPU whenever torch sees one
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}.items():
        os.environ.setdefault(key, value)
    sys.path.insert(0, str(ROOT))
    start = time.perf_counter()
    installed = ensure_packages(args.wheels)

    import torch

    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        raise SystemExit("gpu_check: --device cuda, but torch sees no GPU")

    import transformers
    import trl

    from star.models.tiny import build_model, corpus_from_trajectories, train_tokenizer
    from star.train.grpo import train_grpo
    from star.train.grpo_params import GRPOParams
    from star.train.sft import MetricsCallback, train_sft
    from star.train.sft_params import SFTParams
    from star.travel.planner.distill import ExpertTeacher, run_episode
    from star.travel.env import SYSTEM_PROMPT, TravelEnv
    from star.travel.planner.expert import Expert
    from star.travel.rewards import Scorer
    from star.travel.world.sandbox_index import index_for
    from star.travel.specs import SynthesisSpec, TravelRewardParams, WorldSpec
    from star.travel.world.synthesize import Synthesizer
    from star.travel.world.synthetic import entity_names, generate_world
    from star.travel.world.tools import TravelTools

    size = dict(SIZES["small" if args.small else "full"])
    sft_steps = args.sft_steps or size["sft_steps"]
    grpo_steps = args.grpo_steps or size["grpo_steps"]
    bf16 = not args.fp32
    memory = PeakMemory(torch, cuda)

    # Data: the synthetic world, its queries, and expert trajectories for SFT.
    world = generate_world(WorldSpec(seed=0))
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": size["queries"], "validation": 0, "test": 0})).run()["train"]
    tools, index = TravelTools(world), index_for(world)
    rows = [{"messages": run_episode(ExpertTeacher(Expert()), tools, index, q, 0, seed=0, max_turns=30, fault_rate=0.0)["messages"]} for q in queries]
    corpus = corpus_from_trajectories([r["messages"] for r in rows], TravelEnv(tools).tool_schemas())
    tokenizer = train_tokenizer(corpus, entity_names(world), vocab_size=32000)
    tokenizer.model_max_length = size["max_total_tokens"]

    if args.arch == "llama":
        model = build_llama(tokenizer, size)
    else:
        model = build_model(tokenizer, hidden_size=size["hidden"], num_layers=size["layers"], num_heads=size["heads"],
                            intermediate_size=size["intermediate"], max_position_embeddings=size["max_total_tokens"])
    n_params = sum(p.numel() for p in model.parameters())
    vocab = model.config.vocab_size

    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp_name:
        tmp = Path(tmp_name)
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        del model

        # SFT: star.train.sft.train_sft, one log per step.
        sft_logs: list[tuple[float, dict[str, float]]] = []
        sft_params = SFTParams(
            learning_rate=3e-4, max_steps=sft_steps, per_device_batch_size=size["sft_batch"], max_length=size["max_length"],
            warmup_ratio=0.0, lr_scheduler="constant", bf16=bf16, logging_steps=1, save_steps=10**6,
        )
        memory.reset()
        sft = train_sft(str(tmp / "model"), rows, tmp / "sft", sft_params, tmp / "sft-ckpt",
                        callbacks=[MetricsCallback(lambda metrics, step: sft_logs.append((time.perf_counter(), metrics)))])
        sft_peak = memory.gib()
        sft_steps_logged = [(t, m) for t, m in sft_logs if "loss" in m]
        sft_step_s = [b[0] - a[0] for a, b in zip(sft_steps_logged, sft_steps_logged[1:])]
        sft_tps = [m["tokens_per_second"] for _, m in sft_steps_logged if "tokens_per_second" in m]

        # GRPO: star.train.grpo.train_grpo from the SFT model; with vLLM importable, again with its rollouts.
        def run_grpo(backend: str) -> tuple[dict, list, float]:
            logs: list[tuple[float, dict[str, float]]] = []
            params = GRPOParams(
                algorithm="grpo", steps=grpo_steps, num_generations=size["generations"], queries_per_step=size["queries_per_step"],
                max_turns=size["max_turns"], max_new_tokens=size["max_new_tokens"], max_total_tokens=size["max_total_tokens"],
                learning_rate=1e-5, save_steps=10**6, skip_levels=[], bf16=bf16, backend=backend,
            )
            started = time.perf_counter()
            metrics = train_grpo(
                params, str(tmp / "sft"), queries, lambda q: q.query,
                lambda q, seed: TravelEnv(tools, max_turns=size["max_turns"], seed=seed + q.idx),
                Scorer(index, TravelRewardParams(), params.steps), SYSTEM_PROMPT, tmp / f"grpo-{backend}", tmp / f"grpo-ckpt-{backend}",
                log_fn=lambda metrics, step: logs.append((time.perf_counter(), metrics)),
            )
            return metrics, logs, started

        memory.reset()
        grpo, grpo_logs, grpo_start = run_grpo("transformers")
        grpo_peak = memory.gib()
        vllm_result: dict[str, Any] = {"grpo_vllm": "not run: vLLM is not installed here"}
        if importlib.util.find_spec("vllm") is not None and not args.no_vllm:
            vllm_metrics, vllm_logs, vllm_start = run_grpo("vllm")
            vllm_steps = [m for _, m in vllm_logs if "train/loss" in m]
            vllm_result = {
                "grpo_vllm_step_s": round(median_after_first(step_seconds(vllm_logs, vllm_start)), 4),
                "grpo_vllm_generation_s": round(median_after_first([m["rollout/generation_seconds"] for m in vllm_steps]), 4),
                "grpo_vllm_mismatch_abs": vllm_metrics.get("mismatch_abs"),
                "grpo_vllm_mismatch_max_ratio": max(m["rollout/mismatch_max_ratio"] for m in vllm_steps),
            }

    grpo_steps_logged = [(t, m) for t, m in grpo_logs if "train/loss" in m]
    grpo_step_s = step_seconds(grpo_logs, grpo_start)  # the first includes loading the model
    generation_s = [m["rollout/generation_seconds"] for _, m in grpo_steps_logged]
    scoring_s = [m["rollout/scoring_seconds"] for _, m in grpo_steps_logged]
    episodes = size["generations"] * size["queries_per_step"]
    generated = [m["rollout/completion_tokens"] * episodes for _, m in grpo_steps_logged]
    seen = [m["train/num_tokens"] for _, m in grpo_steps_logged]  # TRL's count of prompt and completion tokens
    step_tokens = [b - a for a, b in zip([0.0] + seen, seen)]

    # The steady state: steps after the first.
    later = slice(1, None) if len(grpo_step_s) > 1 else slice(None)
    step_median = median_after_first(grpo_step_s)
    generation_median = median_after_first(generation_s)
    result: dict[str, Any] = {
        "check": "gpu_check",
        "device": "cuda" if cuda else "cpu",
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "installed": installed,
        "small": args.small,
        "arch": args.arch,
        "dtype": "bf16" if bf16 else "fp32",
        "params_m": round(n_params / 1e6, 2),
        "vocab": vocab,
        "tokenizer_tokens": len(tokenizer),
        "sft_steps": int(sft["steps"]),
        "sft_batch": size["sft_batch"],
        "sft_tokens_per_s": round(median_after_first(sft_tps), 1),
        "sft_tokens_per_s_overall": round(sft["tokens_per_second"], 1),
        "sft_step_s": round(statistics.median(sft_step_s), 4),
        "sft_wall_s": round(sft["wall_seconds"], 2),
        "sft_peak_mem_gib": sft_peak,
        "grpo_steps": int(grpo["steps"]),
        "grpo_episodes_per_step": episodes,
        "grpo_max_turns": size["max_turns"],
        "grpo_max_new_tokens": size["max_new_tokens"],
        "grpo_step_s": round(step_median, 4),
        "grpo_first_step_s": round(grpo_step_s[0], 4),
        "grpo_generation_s": round(generation_median, 4),
        "grpo_update_s": round(step_median - generation_median - median_after_first(scoring_s), 4),
        "grpo_generated_tokens_per_s": round(sum(generated[later]) / sum(generation_s[later]), 1),
        "grpo_train_tokens_per_s": round(sum(step_tokens[later]) / sum(grpo_step_s[later]), 1),
        "grpo_peak_mem_gib": grpo_peak,
        "grpo_mismatch_abs": grpo.get("mismatch_abs"),
        **vllm_result,
        "peak_mem_gib": max(sft_peak, grpo_peak),
        "memory": memory.source,
        "total_s": round(time.perf_counter() - start, 1),
    }
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    result = run(args)
    line = json.dumps(result)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(line + "\n")
    print(line, flush=True)


if __name__ == "__main__":
    main()
