"""The results plots of both domains: written whole, one bar per (group, series)."""

from __future__ import annotations

import pytest

from star.plots import grouped_bars, pyplot
from star.qa.results import plot_em
from star.travel.results import plot_pass_rates


def test_grouped_bars_draws_one_labelled_bar_per_group_and_series(tmp_path, monkeypatch):
    plt = pyplot()
    drawn = {}
    monkeypatch.setattr(plt, "close", lambda fig: drawn.setdefault("fig", fig))  # keep the figure to inspect
    grouped_bars(["a", "b", "c"], {"x": [0.1, 0.5, 1.0], "y": [0.0, 0.25, 0.75]}, tmp_path / "bars.png", ylabel="%", title="t")
    ax = drawn["fig"].axes[0]
    heights = [round(bar.get_height(), 6) for bar in ax.patches]
    assert heights == [10.0, 50.0, 100.0, 0.0, 25.0, 75.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert (tmp_path / "bars.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["bars.png"]  # no temp file left


@pytest.mark.parametrize("plot, results", [
    (plot_em, {"qa_sft": {"em": 0.57, "f1": 0.6}, "naive_rag": {}}),
    (plot_pass_rates, {"sft": {"final_pass_rate": 0.4, "easy/final_pass_rate": 0.5}, "grpo": {"final_pass_rate": 0.6}}),
])
def test_each_domain_plot_writes_a_png(tmp_path, plot, results):
    plot(results, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
