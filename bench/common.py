"""Shared bits of the benchmarks: where the TravelPlanner database is."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def travelplanner_db() -> Path:
    path = Path(os.environ.get("STAR_TRAVELPLANNER_DB", ROOT.parent / "shared/data/travelplanner/database"))
    if not (path / "flights").is_dir():
        raise SystemExit(f"TravelPlanner database not found at {path} (set STAR_TRAVELPLANNER_DB)")
    return path
