"""Episodes fanned out as Prefect tasks, resumed from Prefect's persisted results.

A stage's items are cut into chunks; each chunk is one mapped task run under the
task runner that params choose (threads, a Ray or a Dask cluster). A finished chunk's
result is persisted under the stage's progress directory, keyed by the stage's
fingerprint (what determines the rows) and the chunk, so a rerun after a kill
reads it instead of running it again, and a changed fingerprint never matches.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from prefect import Flow, task, unmapped
from prefect.filesystems import LocalFileSystem
from prefect.futures import as_completed
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from tqdm import tqdm

from star.config import RunnerParams
from star.service import ServiceError

RETRIES = 2
# Episodes per task for the scripted experts. A task costs ~40 ms of Prefect bookkeeping
# (threads, a local server, 2 busy cores) and an expert episode ~4 ms: 200 keep it near 5%.
EXPERT_CHUNK = 200


def task_runner(params: RunnerParams, threads: int) -> TaskRunner:
    if params.kind == "ray":
        from prefect_ray import RayTaskRunner

        import flows
        import star

        # The project's code travels with the job, so cluster nodes need only its dependencies.
        env = {"py_modules": [star, flows], "excludes": ["__pycache__"]}
        return RayTaskRunner(address=params.address, init_kwargs={"runtime_env": env})
    if params.kind == "dask":
        from prefect_dask import DaskTaskRunner

        if params.address:
            # The scheduler's workers import star and flows themselves: run them from a checkout of the project.
            return DaskTaskRunner(address=params.address)
        # The scheduler and nannies run in the stage's process, the workers in processes it spawns
        # (which read the variable): their INFO lines would fill the stage's log.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
        logging.getLogger("distributed").setLevel(logging.WARNING)
        # Worker processes, not threads: the experts' episodes hold the GIL. Spawned, they share the stage's sys.path.
        return DaskTaskRunner(cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "processes": True, "dashboard_address": None})
    return ThreadPoolTaskRunner(max_workers=threads)


def under(flow: Flow, params: RunnerParams, threads: int) -> Flow:
    """`flow` with the task runner that params choose."""
    return flow.with_options(task_runner=task_runner(params, threads))


def chunk_size(params: RunnerParams, default: int) -> int:
    return params.episodes_per_task or default


class AtomicLocalFileSystem(LocalFileSystem):
    """Prefect's local result storage, each file written to a temporary sibling and renamed
    into place, so a kill mid-write never leaves a result cut short."""

    _block_type_name = "Atomic Local File System"

    def write_path(self, path: str, content: bytes, **_: Any) -> str:
        target = self._resolve_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".tmp-{target.name}-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return str(target)

    async def awrite_path(self, path: str, content: bytes) -> str:
        return self.write_path(path, content)


def _storage(store: Path) -> AtomicLocalFileSystem:
    # Prefect takes only a storage block saved on its server; one per directory. The path is
    # absolute, since Ray and Dask workers run elsewhere.
    storage = AtomicLocalFileSystem(basepath=str(store.resolve()))
    storage.save(f"star-results-{hashlib.sha256(storage.basepath.encode()).hexdigest()[:16]}", overwrite=True)
    return storage


def _chunk_key(fingerprint: str, context: Any, parameters: dict[str, Any]) -> str:
    return f"{fingerprint}/{parameters['first']:07d}-{len(parameters['items']):05d}"


def _worth_retrying(task: Any, task_run: Any, state: Any) -> bool:
    # A server the teacher already retried is not retried again: a dead server stops the stage at once.
    return not isinstance(state.result(raise_on_failure=False), ServiceError)


def fan_out(work: Callable[..., list], items: list, size: int, fingerprint: str, store: Path, desc: str = "episodes", **shared: Any) -> list:
    """`work(items=chunk, first=index of its first item, **shared)` for each chunk of `items`,
    as mapped tasks of the running flow; the rows of all chunks, in item order."""
    chunk_task = task(
        work,
        persist_result=True,
        result_storage=_storage(store),
        cache_key_fn=partial(_chunk_key, fingerprint),
        retries=RETRIES,
        retry_delay_seconds=1,
        retry_condition_fn=_worth_retrying,
    )
    starts = list(range(0, len(items), size))
    futures = chunk_task.map(items=[items[i : i + size] for i in starts], first=starts, **{k: unmapped(v) for k, v in shared.items()})
    with tqdm(total=len(items), desc=desc, unit="episode", disable=None) as bar:
        for future in as_completed(futures):
            bar.update(len(future.result()))
    return [row for chunk in futures.result() for row in chunk]


def forget(store: Path) -> None:
    """Drop every persisted chunk once the stage's output is written."""
    shutil.rmtree(store, ignore_errors=True)
