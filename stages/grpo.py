"""`python -m stages.grpo [DOMAIN]`: GRPO from the domain's SFT model (travel by default)."""

from pathlib import Path

from flows.grpo import grpo_flow, train
from stages.common import domain_argument, run_stage, run_with_vllm, wants_vllm
from star.sections import layout

if __name__ == "__main__":
    domain = domain_argument()
    where = layout(domain)
    if wants_vllm("grpo"):  # both domains read grpo.backend
        run_with_vllm(f"{where.prefix}grpo")
    run_stage(
        f"{where.prefix}grpo", ["grpo", "env", "model"], grpo_flow, domain=domain,
        replica=train,  # the other processes under `accelerate launch`
        tasks=where.tasks / "train.jsonl", sft_set=where.sft / "train.jsonl", sft=where.models / "sft", out=where.models / "grpo",
        checkpoints=Path("models/.checkpoints") / f"{where.prefix}grpo", curve=Path(f"reports/train/{where.prefix}grpo.csv"),
    )
