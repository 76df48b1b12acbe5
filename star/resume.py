"""Resumable work: results are appended to a progress log as they finish.

A rerun after an interruption reads the log and skips finished items, so
nothing is done twice and nothing finished is lost. The final output is
written separately (atomically) once every item is done.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from threading import Lock
from typing import Any

from tqdm import tqdm


class ProgressLog:
    def __init__(self, path: str | Path, key: Callable[[dict], Hashable]):
        self.path = Path(path)
        self.key = key
        self.lock = Lock()
        self.rows: dict[Hashable, dict] = {}
        if self.path.exists():
            with open(self.path) as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a line cut short by the interruption
                    self.rows[key(row)] = row

    def done(self, key: Hashable) -> bool:
        return key in self.rows

    def add(self, row: dict) -> None:
        with self.lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(json.dumps(row, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.rows[self.key(row)] = row



def run_resumable(
    items: Iterable[Any],
    key: Callable[[Any], Hashable],
    work: Callable[[Any], dict],
    log: ProgressLog,
    concurrency: int = 1,
    desc: str = "",
) -> list[dict]:
    """Run `work` on every item not yet in `log`; return all rows in item order."""
    items = list(items)
    todo = [it for it in items if not log.done(key(it))]
    bar = tqdm(total=len(items), initial=len(items) - len(todo), desc=desc, disable=None)
    try:
        if concurrency <= 1:
            for it in todo:
                log.add(work(it))
                bar.update()
        else:
            with ThreadPoolExecutor(concurrency) as pool:
                for row in pool.map(work, todo):
                    log.add(row)
                    bar.update()
    finally:
        bar.close()
    return [log.rows[key(it)] for it in items]
