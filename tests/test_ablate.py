"""stages.ablate: a grid's experiments, as the DVC commands it queues."""

import subprocess
import sys
from pathlib import Path

import yaml

from stages.ablate import combinations

ROOT = Path(__file__).resolve().parents[1]


def test_a_mapping_grid_is_every_combination_and_a_list_grid_one_experiment_per_item():
    assert combinations({"a": [1, 2], "b": ["x", "y"]}) == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 2, "b": "x"}, {"a": 2, "b": "y"}]
    assert combinations([{"a": 1, "b": 1}, {"a": 2, "b": 2}]) == [{"a": 1, "b": 1}, {"a": 2, "b": 2}]


def test_the_seeds_grid_moves_every_training_seed_together_and_keeps_the_data_seeds():
    proc = subprocess.run([sys.executable, "-m", "stages.ablate", "seeds", "--dry"], cwd=ROOT, capture_output=True, text=True, check=True)
    queued = [line for line in proc.stdout.splitlines() if "--queue" in line]
    assert len(queued) == 3
    for seed, line in enumerate(queued):
        for key in ("model.tiny.seed", "copy_pretrain.seed", "sft.seed", "grpo.seed"):
            assert f"{key}={seed}" in line, (key, line)
    # The data's seeds (world, synthesis, teacher, filter) are not part of it.
    keys = {key for setting in yaml.safe_load((ROOT / "ablations.yaml").read_text())["seeds"] for key in setting}
    assert not keys & {"world.synthetic.seed", "synthesize.seed", "teacher.seed", "filter.seed"}
