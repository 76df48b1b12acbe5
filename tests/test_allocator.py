"""The allocator a stage runs on: tcmalloc preloaded by restarting the process once.

`make test` installs Debian's libtcmalloc-minimal4 and libjemalloc2 (see the Makefile)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from star.allocator import find_allocator

ROOT = Path(__file__).resolve().parents[1]
SHOW = "import os; from star.allocator import preload; preload(); print(os.environ.get('LD_PRELOAD', '')); print(open('/proc/self/maps').read())"


def run(code_or_module: list[str], **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "STAR_ALLOCATOR")}
    return subprocess.run([sys.executable, *code_or_module], cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("choice, lib", [("tcmalloc", "libtcmalloc_minimal"), ("jemalloc", "libjemalloc")])
def test_preload_restarts_with_the_chosen_allocator_mapped(choice, lib):
    assert find_allocator(choice), f"{lib} is not installed (make test installs it)"
    proc = run(["-c", SHOW], STAR_ALLOCATOR=choice)
    assert proc.returncode == 0, proc.stderr
    preloaded, maps = proc.stdout.split("\n", 1)
    assert lib in preloaded and lib in maps


def test_tcmalloc_is_the_default_and_none_turns_it_off():
    assert "libtcmalloc_minimal" in run(["-c", SHOW]).stdout
    off = run(["-c", SHOW], STAR_ALLOCATOR="none")
    assert "tcmalloc" not in off.stdout and "jemalloc" not in off.stdout


def test_an_unknown_allocator_is_a_clear_error():
    proc = run(["-c", SHOW], STAR_ALLOCATOR="hoard")
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: STAR_ALLOCATOR='hoard': expected one of tcmalloc, jemalloc, none"


def test_a_stage_module_restarts_before_its_imports():
    # The dynamic loader's log shows the library initialised in the restarted process.
    proc = run(["-m", "stages.no_such_stage"], LD_DEBUG="libs")
    assert "No module named stages.no_such_stage" in proc.stderr
    assert "calling init: " in proc.stderr and "libtcmalloc_minimal" in proc.stderr
    plain = run(["-c", "import stages"], LD_DEBUG="libs")
    assert "libtcmalloc_minimal" not in plain.stderr  # only `python -m stages.NAME` restarts


# A few SFT steps of the default's shape in a fresh process: the md5 of the saved weights.
TRAIN = """
import hashlib, json, sys
from pathlib import Path
import torch
from star.models.tiny import TinySpec, corpus_from_trajectories, make_tiny
from star.train.sft import train_sft
from star.train.sft_params import SFTParams

torch.set_num_threads(1)
torch.manual_seed(0)
out = Path(sys.argv[1])
rows = [json.loads(line) for line in open(sys.argv[2])]
corpus = corpus_from_trajectories([r["messages"] for r in rows], json.loads(rows[0]["tools"]))
model = make_tiny(out / "tiny", corpus, json.loads(sys.argv[3]), TinySpec())
train_sft(str(model), rows, out / "model", SFTParams(max_steps=6, per_device_batch_size=4, max_length=1024), out / "ckpt")
print(hashlib.md5((out / "model" / "model.safetensors").read_bytes()).hexdigest())
"""


@pytest.mark.slow
def test_tcmalloc_trains_the_same_bytes(tmp_path, synthetic_sandbox):
    import json

    from star.travel.planner.distill import ExpertTeacher, run_episode
    from star.travel.planner.expert import Expert
    from star.travel.specs import SynthesisSpec
    from star.travel.world.sandbox_index import index_for
    from star.travel.world.synthesize import Synthesizer
    from star.travel.world.synthetic import entity_names
    from star.travel.world.tools import TravelTools

    queries = Synthesizer(synthetic_sandbox, SynthesisSpec(sizes={"train": 8, "validation": 0, "test": 0})).run()["train"]
    tools, index = TravelTools(synthetic_sandbox), index_for(synthetic_sandbox)
    rows = [run_episode(ExpertTeacher(Expert(0.0)), tools, index, q, 0, seed=0, max_turns=16, fault_rate=0.0) for q in queries]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    names = json.dumps(entity_names(synthetic_sandbox))
    digests = {}
    for choice in ("none", "tcmalloc"):
        code = "from star.allocator import preload; preload()\n" + TRAIN
        proc = run(["-c", code, str(tmp_path / choice), str(tmp_path / "rows.jsonl"), names], STAR_ALLOCATOR=choice, HF_HUB_OFFLINE="1")
        assert proc.returncode == 0, proc.stderr[-3000:]
        digests[choice] = proc.stdout.split()[-1]
    assert digests["tcmalloc"] == digests["none"]
