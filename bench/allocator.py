"""Training speed with glibc's malloc against tcmalloc or jemalloc preloaded.

PyTorch on CPU allocates and frees many small tensors a step; a caching
allocator can take much of that cost away. This runs two benchmarks as they
are, first with the system allocator and then with tcmalloc preloaded (the
stages' default; `--all` adds jemalloc), each where the machine has it
(Debian: libtcmalloc-minimal4, libjemalloc2):
bench/sft.py (TRL's SFT tokens per second) and, with `--grpo`,
bench/grpo_step.py (seconds per GRPO step). Ratios are each allocator's figure
over glibc's, from the same run: above 1 is faster for SFT, below 1 for GRPO.

Usage: python bench/allocator.py [--sft-steps 12] [--grpo] [--grpo-steps 2] [--all]
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from star.allocator import ALLOCATORS, find_allocator

BENCH = Path(__file__).resolve().parent


def run(script: str, args: list[str], preload: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = preload
    env["STAR_ALLOCATOR"] = "none"  # the benchmark chooses; the stages' own preloading stays out
    out = subprocess.run([sys.executable, str(BENCH / script), *args], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sft-steps", type=int, default=12)
    parser.add_argument("--grpo", action="store_true", help="the GRPO step too (about 30 s more an allocator)")
    parser.add_argument("--grpo-steps", type=int, default=2, help="the first step is warm-up, left out of the figures")
    parser.add_argument("--all", action="store_true", help="jemalloc too")
    args = parser.parse_args()
    sft_args, grpo_args = ["--steps", str(args.sft_steps), "--queries", "32"], ["--steps", str(args.grpo_steps)]

    figures: dict[str, float | str] = {}
    found = {name: find_allocator(name) for name in (ALLOCATORS if args.all else ["tcmalloc"])}
    for name, lib in [("glibc", None), *((n, p) for n, p in found.items() if p)]:
        sft = run("sft.py", sft_args, lib)
        figures[f"{name}_sft_tokens_per_s"] = sft["trl_tokens_per_s"]
        print(f"{name}: SFT {sft['trl_tokens_per_s']:.0f} tokens/s", flush=True)
        if args.grpo:
            grpo = run("grpo_step.py", grpo_args, lib)
            figures[f"{name}_grpo_s_per_step"] = grpo["seconds_per_step"]
            figures[f"{name}_grpo_update_s"] = grpo["update_s"]
            print(f"{name}: GRPO {grpo['seconds_per_step']:.2f} s/step (update {grpo['update_s']:.2f} s)", flush=True)
    for name in found:
        if found[name]:
            figures[f"{name}_sft_speedup"] = round(figures[f"{name}_sft_tokens_per_s"] / figures["glibc_sft_tokens_per_s"], 3)
            if args.grpo:
                figures[f"{name}_grpo_step_ratio"] = round(figures[f"{name}_grpo_s_per_step"] / figures["glibc_grpo_s_per_step"], 3)
        else:
            figures[name] = "not found"
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
