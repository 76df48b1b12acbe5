"""What a kill left, and how a rerun compares with the uninterrupted run: resumable state, temporary siblings,
digests and (for trained models) tensors close enough."""

from __future__ import annotations

import shutil
from pathlib import Path

from star.sections import DOMAINS, layout, trained

# Every domain's trained models, by the stage that writes them (sft, grpo, qa_sft, qa_grpo).
TRAINED = {p: (layout(d).models / p.removeprefix(layout(d).prefix)).as_posix() for d in DOMAINS for p in trained(d)}
# Where a killed stage keeps what a rerun resumes from.
RESUME_STATE = {"distill": "data/.progress", **{p: f"models/.checkpoints/{p}" for p in TRAINED}}


def state_after_kill(repo: Path, stage: str) -> int:
    """What a rerun can resume from: persisted chunks of episodes, or checkpoint directories (complete ones for SFT)."""
    root = repo / RESUME_STATE.get(stage, "-")
    if not root.exists():
        return 0
    if stage == "distill":  # one result file per finished chunk, under data/.progress/distill/<fingerprint>/
        return sum(1 for p in (root / "distill").glob("*/*") if p.is_file() and not p.name.startswith("."))
    checkpoints = [p for p in root.glob("*/checkpoint-*") if p.is_dir()]
    if stage in ("sft", "qa_sft"):
        checkpoints = [p for p in checkpoints if (p / "trainer_state.json").is_file()]
    return len(checkpoints)


def leftovers(repo: Path, outs: list[str]) -> int:
    """Temporary siblings (.tmp-*, .old-*) next to the stage's outputs."""
    names = {Path(o).name for o in outs}
    parents = {(repo / o).parent for o in outs}
    return sum(1 for d in parents if d.exists() for p in d.iterdir() if any(p.name.startswith((f".tmp-{n}-", f".old-{n}-")) for n in names))


def digest(path: Path) -> str | None:
    from star.io import content_digest

    return content_digest(path) if path.exists() else None


def close_weights(a: Path, b: Path) -> bool:
    """Whether two saved models hold the same tensors within SFT's resume tolerance (tests/test_sft.py)."""
    import torch
    from safetensors.torch import load_file

    def load(directory: Path) -> dict:
        return {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(f).items()}

    try:
        x, y = load(a), load(b)
    except Exception:  # a file cut short is not the same model
        return False
    return x.keys() == y.keys() and all(torch.allclose(x[k].float(), y[k].float(), rtol=1e-4, atol=1e-5) for k in x)


def copy_path(src: Path, dst: Path) -> None:
    if dst.is_dir():
        shutil.rmtree(dst)
    elif dst.exists():
        dst.unlink()
    if src.is_dir():
        shutil.copytree(src, dst)
    elif src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
