"""One `dvc repro` of a stage, watched through the stage's MLflow run, and killed with -9 part way if asked."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def repro(repo: Path, env: dict[str, str], stage: str, kill_after: float | None = None, force: bool = True) -> dict[str, Any]:
    """`dvc repro -s [--force] stage` (--force: run the command even when DVC's run cache has the result)."""
    cmd = [str(Path(sys.executable).parent / "dvc"), "repro", "-s", *(["--force"] if force else []), stage]
    return run_and_kill(cmd, repo, env, kill_after)


def run_and_kill(cmd: list[str], cwd: Path, env: dict[str, str], kill_after: float | None = None, timeout: float = 900) -> dict[str, Any]:
    """Run `cmd`; with `kill_after`, kill -9 its stage process (a descendant running `-m stages.*`) that many
    seconds into its work.

    The work is the time the stage's MLflow run is open in `cwd`'s store: before it the process
    only imports and loads, and after it only shuts down, so a kill there tests nothing a rerun
    must resume. Returns rc, the work's length (seconds; to the process's exit, or to the end of
    `cmd`, when the run was not seen to close), whether the kill was sent, and the output's tail.
    """
    import psutil

    log = tempfile.TemporaryFile("w+")
    runs_before = _stage_runs(cwd)[0]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + timeout
    started = ended = child = None
    killed = False
    while proc.poll() is None and time.monotonic() < deadline:
        now = time.monotonic()
        if child is None:
            child = _stage_process(parent)
        total, running = _stage_runs(cwd)
        if started is None and total > runs_before:
            started = now
        elif started is not None and ended is None and total >= 0 and running == 0:
            ended = now  # the run closed: the stage's work is done
        if child is not None and ended is None:
            try:
                alive = child.status() != psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                alive = False
            if not alive:
                ended = now  # it died before its run closed
            elif started is not None and kill_after is not None and now - started >= kill_after:
                try:
                    child.send_signal(signal.SIGKILL)
                    killed = True
                except psutil.NoSuchProcess:
                    pass  # it finished first
                ended = now
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    work = ((ended or time.monotonic()) - started) if started is not None else None
    log.seek(0)
    output = _without_progress(log.read())
    log.close()
    return {"rc": proc.returncode, "lifetime_s": work, "killed": killed, "output": output[-3000:]}


def _stage_process(parent: Any) -> Any | None:
    """The stage's python process among the descendants of a `dvc repro`."""
    import psutil

    try:
        for child in parent.children(recursive=True):
            try:
                cmd = child.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if "-m" in cmd and any(part.startswith("stages.") for part in cmd):
                return child
    except psutil.NoSuchProcess:
        pass
    return None


def _stage_runs(repo: Path) -> tuple[int, int]:
    """(stage runs, of which RUNNING) in the repository's MLflow store; (-1, -1) while it is locked."""
    import sqlite3

    try:
        status = mlflow_status(repo)
    except sqlite3.OperationalError:
        return -1, -1
    return sum(status.values()), status.get("RUNNING", 0)


def mlflow_status(repo: Path) -> dict[str, int]:
    import sqlite3

    db = repo / "mlflow.db"
    if not db.exists():
        return {}
    with contextlib.closing(sqlite3.connect(db)) as con:
        rows = con.execute(
            "select r.status, count(*) from runs r join tags t on t.run_uuid = r.run_uuid and t.key = 'star.role' and t.value = 'stage' group by r.status"
        ).fetchall()
    return dict(rows)


def _without_progress(text: str) -> str:
    """The output with progress bars dropped, so a failure's message is what the tail keeps."""
    lines = (line.rsplit("\r", 1)[-1] for line in text.split("\n"))
    return "\n".join(line for line in lines if not re.search(r"\d+%\|", line))
