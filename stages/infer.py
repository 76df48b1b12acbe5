"""`python -m stages.infer DOMAIN POLICY`: one policy on the domain's test split.

POLICY is a model stage of the domain (base, sft, grpo; QA's are named qa_base, ...),
one of its baselines (on the base model), another domain's model (travel_sft: the
travel agent out of its domain), that model under one of the baselines' prompts
(travel_sft_naive_rag), or the domain's teacher (teacher, qa_teacher).
"""

import sys
from pathlib import Path

from flows.infer import infer_flow
from stages.common import PROGRESS, run_stage, run_with_vllm, wants_vllm
from star.sections import DOMAINS, baselines, layout


def model_dir(domain: str, policy: str) -> Path | None:
    """The model a policy plays; None for the domain's teacher."""
    where = layout(domain)
    if policy == f"{where.prefix}teacher":
        return None
    for other in DOMAINS:
        if other != domain and policy.startswith(f"{other}_"):
            name = policy.removeprefix(f"{other}_")
            for baseline in baselines(domain):  # another domain's model, asked as the baseline asks
                name = name.removesuffix(f"_{baseline}")
            return layout(other).models / name
    name = policy.removeprefix(where.prefix)
    return where.models / baselines(domain).get(name, name)


if __name__ == "__main__":
    domain, policy = sys.argv[1], sys.argv[2]
    where = layout(domain)
    name = f"{where.prefix}infer_teacher" if model_dir(domain, policy) is None else f"{where.prefix}infer@{policy}"
    if wants_vllm("infer") and model_dir(domain, policy) is not None:
        run_with_vllm(name)
    run_stage(
        name, ["infer", "model", "runner"], infer_flow, domain=domain, policy=policy,
        tasks=where.tasks / "test.jsonl", model_dir=model_dir(domain, policy), out=where.infer / policy,
        report=where.reports / policy, store=PROGRESS / f"{where.prefix}infer_{policy}",
    )
