"""synthesize: compose feasible queries over the sandbox, split train / validation / test.

With `source: official` the test split is the published query file instead;
train and validation are still composed, so training works as before.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.tasks import task
from star.config import EnvParams, SynthesizeParams
from star.io import atomic_dir, write_json
from star.travel.official import check_world, read_official_queries
from star.travel.paraphrase import paraphrase
from star.travel.sandbox import Sandbox
from star.travel.specs import SynthesisSpec
from star.travel.synthesize import SPLITS, Synthesizer


@task
def compose_queries(world: Path, synthesize: SynthesizeParams, env: EnvParams) -> tuple[dict, dict]:
    spec = SynthesisSpec.model_validate(synthesize.model_dump(exclude={"paraphrase"}))
    sandbox = Sandbox.load(world)
    official = None
    if spec.source == "official":
        # Read first: a bad file stops the stage before any synthesis.
        official = read_official_queries(spec.path)
        check_world(official, dict(zip(sandbox.cities["city"], sandbox.cities["state"])), spec.path)
        spec = spec.model_copy(update={"sizes": {**spec.sizes, "test": 0}})
    synthesizer = Synthesizer(sandbox, spec, row_cap=env.row_cap, max_calls=env.max_turns - 1)
    splits, stats = synthesizer.run(), dict(synthesizer.stats)
    if synthesize.paraphrase.enabled:
        for split, queries in splits.items():
            splits[split], counts = paraphrase(queries, synthesize.paraphrase)
            stats.update({f"paraphrase_{k}": stats.get(f"paraphrase_{k}", 0) + v for k, v in counts.items()})
    if official is not None:  # the published wording is kept: never paraphrased
        splits["test"] = official
        stats["official_test"] = len(official)
    return splits, stats


@task
def save_queries(splits: dict, stats: dict, out: Path) -> dict[str, float]:
    with atomic_dir(out) as tmp:
        for split in SPLITS:
            with open(tmp / f"{split}.jsonl", "w") as f:
                for query in splits[split]:
                    f.write(query.model_dump_json() + "\n")
        write_json(tmp / "stats.json", stats)
    metrics = {f"queries_{s}": len(splits[s]) for s in SPLITS}
    for split in SPLITS:
        for query in splits[split]:
            metrics[f"{split}_{query.level}"] = metrics.get(f"{split}_{query.level}", 0) + 1
    return {**metrics, **{k: v for k, v in stats.items()}}


@flow(name="synthesize")
def synthesize_flow(synthesize: SynthesizeParams, env: EnvParams, world: Path, out: Path) -> dict[str, float]:
    splits, stats = compose_queries(world, synthesize, env)
    return save_queries(splits, stats, out)
