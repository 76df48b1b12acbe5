"""Matplotlib without a display, and figures saved atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from star.io import atomic_path


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: str | Path, dpi: int = 120) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    pyplot().close(fig)
