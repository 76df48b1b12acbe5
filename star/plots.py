"""Matplotlib without a display, and figures saved atomically."""

from __future__ import annotations

from collections.abc import Sequence
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


def grouped_bars(groups: Sequence[str], series: dict[str, Sequence[float]], path: str | Path, *, ylabel: str, title: str, figsize: tuple[float, float] = (7, 3.5), rotate: bool = False) -> None:
    """One group of bars per entry of `groups`, one bar per series in each, in percent, labelled."""
    plt = pyplot()
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=figsize)
    for i, (label, values) in enumerate(series.items()):
        bars = ax.bar([x + i * width for x in range(len(groups))], [100 * v for v in values], width, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks([x + width * (len(series) - 1) / 2 for x in range(len(groups))], groups, **({"rotation": 30, "ha": "right", "fontsize": 8} if rotate else {}))
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
