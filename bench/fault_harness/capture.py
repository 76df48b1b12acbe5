"""What the secrets search needs around the code it runs: environment variables set for a block, everything
logged or printed in it, and a key counted in files and texts."""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def environment(**values: str | None) -> Iterator[None]:
    """Set (or, with None, unset) environment variables for the block."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def captured_output() -> Iterator[io.StringIO]:
    """Everything logged (DEBUG and up, any logger) and printed in the block."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    # the root logger, plus the loggers that do not pass records up to it
    loggers = [logging.getLogger()] + [lg for lg in map(logging.getLogger, ("openai", "httpx", "httpcore", "mlflow", "prefect", "tenacity")) if not lg.propagate]
    levels = {lg.name: lg.level for lg in loggers}
    watched = [logging.getLogger(n) for n in ("openai", "httpx", "httpcore", "mlflow", "star", "tenacity")]
    watched_levels = [lg.level for lg in watched]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
    for lg in watched:
        lg.setLevel(logging.DEBUG)
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
            yield buffer
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
            lg.setLevel(levels[lg.name])
        for lg, level in zip(watched, watched_levels):
            lg.setLevel(level)


def count_key(key: str, root: Path | None = None, texts: dict[str, str] | None = None) -> dict[str, int]:
    """Occurrences of `key` in every file under `root` (by path below it, two levels) and in `texts`."""
    needle = key.encode()
    counts: dict[str, int] = {}
    if root is not None:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not path.is_symlink():
                n = path.read_bytes().count(needle)
                if n:
                    place = "/".join(path.relative_to(root).parts[:2])
                    counts[place] = counts.get(place, 0) + n
                    print(f"secrets: planted key found {n}x in {path.relative_to(root)}")
    for name, text in (texts or {}).items():
        n = text.count(key)
        if n:
            counts[name] = counts.get(name, 0) + n
            print(f"secrets: planted key found {n}x in {name}")
    return counts
