"""Atomic output: write to a temporary sibling, then rename into place.

An interrupted stage leaves at most a `.tmp-*` sibling behind, never a
half-written file or directory under the final name.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask_mode(mode: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary file path; on success it replaces `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, _umask_mode(0o666))  # mkstemp makes owner-only files
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary directory; on success it replaces the directory `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}-", dir=path.parent))
    os.chmod(tmp, _umask_mode(0o777))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".old-{path.name}-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")


def read_jsonl(path: str | Path) -> list[Any]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def content_digest(*paths: str | Path) -> str:
    """A hash of the bytes of every file under `paths` (files or directories), names included."""
    import hashlib

    digest = hashlib.sha256()
    for root in map(Path, paths):
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for f in files:
            digest.update(str(f.relative_to(root) if root.is_dir() else f.name).encode() + b"\0")
            digest.update(f.read_bytes())
    return digest.hexdigest()


def fingerprint(*settings: Any, inputs: Iterable[str | Path] = ()) -> str:
    """What a resumable piece of work belongs to: its settings (pydantic models, strings or JSON values)
    and the bytes of its input files. Saved progress lives under it, so any change starts afresh."""
    import hashlib

    text = "".join(s.model_dump_json() if hasattr(s, "model_dump_json") else s if isinstance(s, str) else json.dumps(s) for s in settings)
    return hashlib.sha256((text + content_digest(*inputs)).encode()).hexdigest()[:16]
