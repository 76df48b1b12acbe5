"""What each process trained on, step by step, when STAR_RECORD_BATCHES names a directory.

The multi-process tests read these files to check that the processes split the data.
Callers check `recording()` first, so an unset variable costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

RECORD_BATCHES = "STAR_RECORD_BATCHES"


def recording() -> bool:
    """Whether batches are recorded: check it before gathering what to record."""
    return bool(os.environ.get(RECORD_BATCHES))


def digest(value: str | list[int]) -> str:
    """A short hash of a prompt's text or a sequence's token ids."""
    return hashlib.sha256((value if isinstance(value, str) else json.dumps(value)).encode()).hexdigest()[:16]


def record_batch(rank: int, step: int, key: str, digests: list[str]) -> None:
    """Append {step, key: digests} to rank<rank>.jsonl under $STAR_RECORD_BATCHES (only while `recording()`)."""
    directory = Path(os.environ[RECORD_BATCHES])
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"rank{rank}.jsonl", "a") as f:
        f.write(json.dumps({"step": step, key: digests}) + "\n")
