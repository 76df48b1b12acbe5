"""`python -m stages.probe POLICY`: the travel policy's tool arguments, per slot and on counterfactual queries."""

import sys

from flows.travel.probe import probe_flow
from stages.common import run_stage
from star.sections import layout

if __name__ == "__main__":
    policy = sys.argv[1]
    where = layout("travel")
    out = where.reports / policy
    run_stage(
        f"probe@{policy}", ["infer", "model"], probe_flow, domain="travel",
        artifacts=[out / "arguments.csv"], policy=policy,
        train=where.tasks / "train.jsonl", queries=where.tasks / "test.jsonl",
        played=where.infer / policy, model_dir=where.models / policy, out=out,
    )
