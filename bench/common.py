"""Shared bits of the benchmarks: where the TravelPlanner database is, and the compute ceiling."""

import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def travelplanner_db() -> Path:
    path = Path(os.environ.get("STAR_TRAVELPLANNER_DB", ROOT.parent / "shared/data/travelplanner/database"))
    if not (path / "flights").is_dir():
        raise SystemExit(f"TravelPlanner database not found at {path} (set STAR_TRAVELPLANNER_DB)")
    return path


def matmul_gflops(m: int, k: int, n: int, seconds: float = 1.0) -> float:
    """fp32 GFLOP/s of an (m, k) @ (k, n) matmul on torch's current threads."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        calls += 1
    return 2 * m * k * n * calls / (time.perf_counter() - start) / 1e9


def token_flops(model):
    """Forward FLOPs of one token at a position: 2 per weight of every linear layer, plus attention over its context."""
    import torch

    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = 4 * model.config.num_hidden_layers * model.config.hidden_size
    return lambda position: 2 * weights + attention * (position + 1)
