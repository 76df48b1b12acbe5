"""Training curves as CSV, one row per logged step, for `dvc plots` and the report.

They are read from the trainer's `log_history`, which checkpoints keep, so a
resumed run still writes its whole curve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from star.io import atomic_path


def curve(log_history: list[dict[str, Any]], marker: str) -> pl.DataFrame:
    """The step logs that carry `marker` (e.g. "loss"), numbers only, sorted by step."""
    rows = [
        {"step": int(log["step"]), **{k.replace("/", "_"): float(v) for k, v in log.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}}
        for log in log_history
        if marker in log and "step" in log
    ]
    if not rows:
        return pl.DataFrame({"step": []}, schema={"step": pl.Int64})
    return pl.DataFrame(rows).unique("step", keep="last").sort("step")


def write_curve(path: str | Path, frame: pl.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.write_csv(tmp)
