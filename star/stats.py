"""Paired bootstrap confidence intervals for a gain between two policies on the same items."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def paired_bootstrap(after: Mapping[object, float], before: Mapping[object, float], samples: int = 10_000, seed: int = 0, level: float = 0.95) -> dict[str, float]:
    """Mean of `after - before` over the items both scored, with a percentile CI.

    Items are resampled with replacement, each keeping its pair of scores, so
    the interval reflects the per-item differences rather than two independent
    noisy means.
    """
    items = sorted(set(after) & set(before), key=str)
    if not items:
        raise ValueError("no item is scored by both policies")
    diff = np.array([float(after[i]) - float(before[i]) for i in items])
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(samples, len(diff)))].mean(axis=1)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return {"gain": float(diff.mean()), "ci_low": float(lo), "ci_high": float(hi), "n": len(items)}


def gains_table(gains: Mapping[str, Mapping[str, float]]) -> str:
    """Markdown: one row per comparison, gain in points with its 95% CI."""
    lines = ["| comparison | n | gain (points) | 95% CI |", "|---|---:|---:|---|"]
    for name, g in gains.items():
        lines.append(f"| {name} | {g['n']} | {100 * g['gain']:+.1f} | [{100 * g['ci_low']:+.1f}, {100 * g['ci_high']:+.1f}] |")
    return "\n".join(lines) + "\n"
