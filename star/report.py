"""Compare pipeline runs from MLflow: a table, a markdown report and plots.

Each pipeline run (one `dvc repro` or `dvc exp run`) is a parent run tagged
`star.role=pipeline` with one child per stage (see `star.tracking`). This module
reads them back:

- `load_runs` gathers, per parent, the params of its children (and of the parent,
  where `star.tracking.log_pipeline_summary` put them), each policy's final
  metrics from its `evaluate*@<policy>` children, SFT and GRPO wall time, and
  the GRPO step curves.
- `varying_params`, `comparison_table` and `markdown` make the comparison;
  `write_report` writes it with its plots.

    python -m star.report --tracking-uri sqlite:///mlflow.db --out reports/compare \\
        [--filter "tags.dvc.exp_name LIKE 'reward-%'"] [--where reward.weights.success=1.0] [--policy grpo]

A `dvc exp run` re-runs only the stages whose inputs changed, so its parent has
children for those stages only: metrics and params of stages it did not re-run
are missing from that run (null in the table) unless the pipeline logged them
on the parent with `log_pipeline_summary`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, Field

from star.io import atomic_path, write_json, write_text
from star.plots import pyplot, save_png
from star.sections import DOMAINS, levels, metrics, trained

EXPERIMENT = "star"
# every domain's headline metrics, then its first metric per level, in the order the table shows them
METRICS = tuple(m for domain in DOMAINS for m in metrics(domain))
LEVEL_METRICS = tuple(f"{level}/{metrics(domain)[0]}" for domain in DOMAINS for level in levels(domain))
TRAIN_STAGES = ("sft", "grpo")
CURVES = ("rollout/reward", "rollout/success")
# every domain's trained policies, shown by default; the others (base, teacher,
# baselines, the travel agent on QA) when asked for, or when nothing else was evaluated
TRAINED = tuple(policy for domain in DOMAINS for policy in trained(domain))
POLICY_ORDER = (*TRAINED, "base", "teacher")
# params whose effect on the final pass rate gets its own plot when they vary
SWEEP_PARAMS = ("filter.examples", "env.fault_rate")
_LEVEL_KEY = re.compile(rf"^({'|'.join(level for domain in DOMAINS for level in levels(domain))})_(.+)$")


class Curve(BaseModel):
    steps: list[int] = Field(default_factory=list)
    values: list[float] = Field(default_factory=list)


class StageRun(BaseModel):
    """One stage's MLflow run (the latest, when a pipeline ran a stage more than once)."""

    run_id: str
    stage: str
    status: str
    start_time: datetime | None = None
    end_time: datetime | None = None
    params: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)

    @property
    def minutes(self) -> float | None:
        if self.start_time is None or self.end_time is None:
            return None
        return (self.end_time - self.start_time).total_seconds() / 60


class PipelineRun(BaseModel):
    run_id: str
    name: str  # the `star.pipeline` tag: the DVC experiment name, else commit-paramshash
    start_time: datetime | None = None
    git_commit: str | None = None
    params_hash: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    params: dict[str, str] = Field(default_factory=dict)  # the parent's, overlaid with its children's
    metrics: dict[str, float] = Field(default_factory=dict)  # the parent's own (log_pipeline_summary)
    stages: dict[str, StageRun] = Field(default_factory=dict)
    finals: dict[str, dict[str, float]] = Field(default_factory=dict)  # policy -> metric -> value
    train_minutes: dict[str, float] = Field(default_factory=dict)  # sft, grpo
    curves: dict[str, Curve] = Field(default_factory=dict)  # the grpo child's rollout/reward, rollout/success


# ---------------------------------------------------------------- loading


def _time(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


def _search_all(client: Any, experiment_id: str, filter_string: str) -> list[Any]:
    runs, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], filter_string=filter_string, max_results=1000, page_token=token, order_by=["attributes.start_time ASC"]
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _normalize(metrics: Mapping[str, float]) -> dict[str, float]:
    """Per-level keys as `level/metric`: evaluate@ logs `easy_final_pass_rate` (its JSON's
    `easy/final_pass_rate`, flattened). Only where `metric` is itself logged, so `hard_micro` stays."""
    out = {}
    for key, value in metrics.items():
        match = _LEVEL_KEY.match(key)
        out[f"{match[1]}/{match[2]}" if match and match[2] in metrics else key] = value
    return out


def _evaluation(stage: str) -> tuple[str, str] | None:
    """`evaluate@grpo` -> ("evaluate", "grpo"); `evaluate_qa@sft` -> ("evaluate_qa", "sft"); else None."""
    kind, at, policy = stage.partition("@")
    return (kind, policy) if at and kind.startswith("evaluate") and policy else None


def _history(client: Any, run_id: str, key: str) -> Curve:
    by_step: dict[int, tuple[int, float]] = {}
    for m in client.get_metric_history(run_id, key):
        # a resumed run may log a step again: the latest value wins
        if m.step not in by_step or m.timestamp >= by_step[m.step][0]:
            by_step[m.step] = (m.timestamp, m.value)
    steps = sorted(by_step)
    return Curve(steps=steps, values=[by_step[s][1] for s in steps])


def _pipeline(client: Any, experiment_id: str, parent: Any, curve_keys: Sequence[str]) -> PipelineRun:
    children = _search_all(client, experiment_id, f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    stages: dict[str, StageRun] = {}
    # oldest first, so the latest run of a stage (a FINISHED one when there is one) wins
    children.sort(key=lambda r: (r.info.status == "FINISHED", r.info.start_time or 0))
    for child in children:
        stage = child.data.tags.get("star.stage") or child.info.run_name
        stages[stage] = StageRun(
            run_id=child.info.run_id,
            stage=stage,
            status=child.info.status,
            start_time=_time(child.info.start_time),
            end_time=_time(child.info.end_time),
            params=dict(child.data.params),
            metrics=dict(child.data.metrics),
        )

    params = dict(parent.data.params)
    for name in sorted(stages):
        params.update(stages[name].params)

    finals: dict[str, dict[str, float]] = {}
    evaluations = [(*e, s) for s in stages if (e := _evaluation(s))]
    # plain `evaluate@` last: on a metric name two evaluations share, its value wins
    for kind, policy, stage in sorted(evaluations, key=lambda e: (e[0] == "evaluate", e[0], e[1])):
        finals.setdefault(policy, {}).update(_normalize(stages[stage].metrics))
    # what the parent holds as `<policy>/<metric>` fills what no evaluate child gave
    parent_metrics = dict(parent.data.metrics)
    by_policy: dict[str, dict[str, float]] = {}
    for key, value in parent_metrics.items():
        policy, slash, metric = key.partition("/")
        if slash and metric:
            by_policy.setdefault(policy, {})[metric] = value
    for policy, logged in by_policy.items():
        for metric, value in _normalize(logged).items():
            finals.setdefault(policy, {}).setdefault(metric, value)

    train_minutes = {s: m for s in TRAIN_STAGES if s in stages and (m := stages[s].minutes) is not None}
    curves: dict[str, Curve] = {}
    if "grpo" in stages:
        for key in curve_keys:
            curve = _history(client, stages["grpo"].run_id, key)
            if curve.steps:
                curves[key] = curve

    tags = dict(parent.data.tags)
    return PipelineRun(
        run_id=parent.info.run_id,
        name=tags.get("star.pipeline", parent.info.run_name or parent.info.run_id),
        start_time=_time(parent.info.start_time),
        git_commit=tags.get("star.git_commit"),
        params_hash=tags.get("star.params_hash"),
        tags={k: v for k, v in tags.items() if not k.startswith("mlflow.")},
        params=params,
        metrics=parent_metrics,
        stages=stages,
        finals=finals,
        train_minutes=train_minutes,
        curves=curves,
    )


def load_runs(
    tracking_uri: str,
    experiment: str = EXPERIMENT,
    filter_string: str | None = None,
    where: Mapping[str, Any] | None = None,
    curve_keys: Sequence[str] = CURVES,
) -> list[PipelineRun]:
    """Every pipeline run in `experiment`, oldest first, each with what its stage runs logged.

    `filter_string` is an MLflow search filter on the parent runs, ANDed with
    `tags.star.role = 'pipeline'` (e.g. ``tags.`dvc.exp_name` LIKE 'fault-%'``;
    params there are the parent's own, from `log_pipeline_summary`). `where`
    keeps the runs whose merged params (parent and children) equal the given
    values, compared as strings.
    """
    import mlflow  # slow to import

    client = mlflow.MlflowClient(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    condition = "tags.`star.role` = 'pipeline'"
    if filter_string:
        condition = f"{condition} and {filter_string}"
    parents = _search_all(client, found.experiment_id, condition)
    runs = [_pipeline(client, found.experiment_id, parent, curve_keys) for parent in parents]
    if where:
        runs = [r for r in runs if all(r.params.get(k) == str(v) for k, v in where.items())]
    return runs


# ---------------------------------------------------------------- comparing


def varying_params(runs: Sequence[PipelineRun]) -> list[str]:
    """Params with at least two different values among the runs that logged them, sorted.

    A param only some runs logged (a stage a `dvc exp run` did not re-run) counts
    only through the runs that have it; one identical everywhere (paths, seeds) never varies.
    """
    values: dict[str, set[str]] = {}
    for run in runs:
        for key, value in run.params.items():
            values.setdefault(key, set()).add(value)
    return sorted(k for k, v in values.items() if len(v) > 1)


def _policies(runs: Sequence[PipelineRun], policies: Sequence[str] | None) -> list[str]:
    present = {p for r in runs for p in r.finals}
    if policies is not None:
        return [p for p in policies if p in present]
    order = sorted(present, key=lambda p: (POLICY_ORDER.index(p) if p in POLICY_ORDER else len(POLICY_ORDER), p))
    chosen = [p for p in order if p in TRAINED]
    return chosen or order


def _metric_columns(runs: Sequence[PipelineRun], policy: str) -> list[str]:
    """The domains' headline metrics, then their first metric per level (final pass by level, EM by hops)."""
    keys = {k for r in runs for k in r.finals.get(policy, {})}
    return [k for k in (*METRICS, *LEVEL_METRICS) if k in keys]


def _scored_by(runs: Sequence[PipelineRun], policy: str) -> tuple[str, tuple[str, ...]] | None:
    """(metric, levels) of the domain whose first metric `policy` logged: final pass for travel, EM for QA."""
    for domain in DOMAINS:
        first = metrics(domain)[:1]
        if first and any(first[0] in r.finals.get(policy, {}) for r in runs):
            return first[0], levels(domain)
    return None


def _typed(values: list[str | None]) -> pl.Series:
    """Param values as numbers when they all read as numbers, else as strings."""
    if any(v is not None for v in values):
        for kind, cast in ((pl.Int64, int), (pl.Float64, float)):
            try:
                return pl.Series([None if v is None else cast(v) for v in values], dtype=kind)
            except (TypeError, ValueError):
                continue
    return pl.Series(values, dtype=pl.Utf8)


def comparison_table(
    runs: Sequence[PipelineRun], policies: Sequence[str] | None = None, params: Sequence[str] | None = None
) -> pl.DataFrame:
    """One row per run: `run`, each varying param (or `params`), then per policy
    `<policy>/<metric>` (headline metrics, final pass per level, QA em, f1, per-hop em),
    then `sft_minutes`, `grpo_minutes` and `grpo_seconds_per_step` when logged.

    `policies` defaults to the trained policies (grpo, sft, qa_grpo, qa_sft), or every
    evaluated policy when none of those was.
    """
    params = list(varying_params(runs) if params is None else params)
    columns: dict[str, pl.Series] = {"run": pl.Series([r.name for r in runs], dtype=pl.Utf8)}
    for key in params:
        columns[key] = _typed([r.params.get(key) for r in runs])
    for policy in _policies(runs, policies):
        for metric in _metric_columns(runs, policy):
            columns[f"{policy}/{metric}"] = pl.Series([r.finals.get(policy, {}).get(metric) for r in runs], dtype=pl.Float64)
    for stage in TRAIN_STAGES:
        if any(stage in r.train_minutes for r in runs):
            columns[f"{stage}_minutes"] = pl.Series([r.train_minutes.get(stage) for r in runs], dtype=pl.Float64)
    seconds = [r.stages["grpo"].metrics.get("seconds_per_step") if "grpo" in r.stages else None for r in runs]
    if any(s is not None for s in seconds):
        columns["grpo_seconds_per_step"] = pl.Series(seconds, dtype=pl.Float64)
    return pl.DataFrame(columns)


def _cell(column: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        if "/" in column:  # a policy's metric: a rate
            return f"{100 * value:.1f}%"
        if column.endswith(("_minutes", "_seconds_per_step")):
            return f"{value:.1f}"
        return f"{value:g}"
    return str(value).replace("|", "\\|")


def markdown(table: pl.DataFrame) -> str:
    """`table` as a markdown table: rates as percentages, minutes with one decimal, '-' for missing."""
    columns = table.columns
    numeric = {c for c, t in table.schema.items() if t.is_numeric()}
    lines = [
        "| " + " | ".join(c.replace("|", "\\|") for c in columns) + " |",
        "|" + "|".join("---:" if c in numeric else "---" for c in columns) + "|",
    ]
    for row in table.iter_rows():
        lines.append("| " + " | ".join(_cell(c, v) for c, v in zip(columns, row)) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plots


def plot_pass_rates(runs: Sequence[PipelineRun], path: str | Path, policies: Sequence[str] | None = None) -> bool:
    """Grouped bars of each policy's first metric (final pass, EM), overall and per level, one bar per run; one panel per policy."""
    chosen = [(p, scored) for p in _policies(runs, policies) if (scored := _scored_by(runs, p))]
    if not chosen:
        return False
    plt = pyplot()
    width = 0.8 / max(len(runs), 1)
    fig, axes = plt.subplots(len(chosen), 1, figsize=(max(7, 1.2 * len(runs) + 4), 3.2 * len(chosen)), squeeze=False)
    for ax, (policy, (metric, policy_levels)) in zip(axes[:, 0], chosen):
        scopes = ["overall", *policy_levels]
        for i, run in enumerate(runs):
            finals = run.finals.get(policy, {})
            values = [100 * finals.get(metric if s == "overall" else f"{s}/{metric}", math.nan) for s in scopes]
            bars = ax.bar([x + i * width for x in range(len(scopes))], values, width, label=run.name)
            ax.bar_label(bars, fmt="%.0f", fontsize=6)
        ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(scopes))], scopes)
        ax.set_ylabel(f"{metric.replace('_', ' ')} (%)")
        ax.set_ylim(0, 105)
        ax.set_title(f"{policy}: {metric.replace('_', ' ')} by level")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, Path(path))
    return True


def plot_curves(runs: Sequence[PipelineRun], path: str | Path, keys: Sequence[str] = CURVES) -> bool:
    """GRPO step curves of every run overlaid, one panel per key (reward, success)."""
    if not any(k in r.curves for r in runs for k in keys):
        return False
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.5), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for run in runs:
            if key in run.curves:
                ax.plot(run.curves[key].steps, run.curves[key].values, marker=".", label=run.name)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("GRPO step")
        ax.set_title(key)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, Path(path))
    return True


def plot_against(runs: Sequence[PipelineRun], param: str, path: str | Path, policies: Sequence[str] | None = None) -> bool:
    """Each policy's first metric (final pass, EM) against a numeric param; False (no plot) unless it takes two values.

    One line per policy and per combination of the other params that vary, so
    that a line joins only runs that differ in `param` alone.
    """
    points = []
    for run in runs:
        try:
            points.append((float(run.params[param]), run))
        except (KeyError, ValueError):
            continue
    if len({x for x, _ in points}) < 2:
        return False
    points.sort(key=lambda p: p[0])
    others = [k for k in varying_params(runs) if k != param]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    drawn = False
    for policy in _policies(runs, policies):
        if not (scored := _scored_by(runs, policy)):
            continue
        metric = scored[0]
        lines: dict[tuple, list[tuple[float, float]]] = {}
        for x, run in points:
            if metric in run.finals.get(policy, {}):
                key = tuple(run.params.get(k, "?") for k in others)
                lines.setdefault(key, []).append((x, 100 * run.finals[policy][metric]))
        for key, xy in lines.items():
            label = ", ".join([f"{policy} {metric}", *(f"{k}={v}" for k, v in zip(others, key))])
            ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=label)
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel(param)
    ax.set_ylabel("%")
    ax.set_title(f"final pass and EM against {param}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, Path(path))
    return True


# ---------------------------------------------------------------- report


def write_report(
    runs: Sequence[PipelineRun], out_dir: str | Path, policies: Sequence[str] | None = None
) -> dict[str, Path]:
    """Write report.md, report.json (every run in full, the table), report.csv and the plots.

    Each file is written atomically; a plot that does not apply (no GRPO curves, a
    sweep param that does not vary) is not written. Returns {name: path} of what was written.
    """
    out = Path(out_dir)
    table = comparison_table(runs, policies)
    varying = varying_params(runs)
    paths: dict[str, Path] = {}

    plots: list[tuple[str, str, str]] = []  # (name, file, caption)
    if plot_pass_rates(runs, out / "pass_rates.png", policies):
        plots.append(("pass_rates", "pass_rates.png", "Final pass rate and EM by level"))
    if plot_curves(runs, out / "grpo_curves.png"):
        plots.append(("grpo_curves", "grpo_curves.png", "GRPO reward and success per step"))
    for param in SWEEP_PARAMS:
        if param in varying and plot_against(runs, param, out / f"pass_vs_{param}.png", policies):
            plots.append((f"pass_vs_{param}", f"pass_vs_{param}.png", f"Final pass rate and EM against {param}"))
    for name, file, _ in plots:
        paths[name] = out / file

    lines = [
        "# Pipeline runs compared",
        "",
        f"{len(runs)} runs. Params that differ: {', '.join(f'`{p}`' for p in varying) or 'none'}.",
        "Rates are percentages; `-` is a value the run did not log (a stage it did not re-run).",
        "",
        markdown(table),
    ]
    lines += [f"![{caption}]({file})\n" for _, file, caption in plots]
    paths["markdown"] = out / "report.md"
    write_text(paths["markdown"], "\n".join(lines))

    paths["json"] = out / "report.json"
    report = {"varying_params": varying, "table": table.to_dicts(), "runs": [r.model_dump(mode="json") for r in runs]}
    write_json(paths["json"], _finite(report))
    paths["csv"] = out / "report.csv"
    with atomic_path(paths["csv"]) as tmp:
        table.write_csv(tmp)
    return paths


def _finite(obj: Any) -> Any:
    """NaN and infinities (a throughput over zero seconds) as null: JSON has no such numbers."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _pairs(items: Iterable[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            raise argparse.ArgumentTypeError(f"--where takes KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    from star.tracking import tracking_uri

    parser = argparse.ArgumentParser(prog="python -m star.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here")
    parser.add_argument("--experiment", default=EXPERIMENT)
    parser.add_argument("--out", type=Path, default=Path("reports/compare"))
    parser.add_argument("--filter", default=None, help="MLflow filter on the parent runs, ANDed with tags.star.role = 'pipeline'")
    parser.add_argument("--where", action="append", default=[], metavar="PARAM=VALUE", help="keep runs with this param value")
    parser.add_argument("--policy", action="append", default=None, help="policies to show (repeat); default: the trained ones (grpo, sft, qa_grpo, qa_sft)")
    args = parser.parse_args(argv)
    try:
        where = _pairs(args.where)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))

    runs = load_runs(args.tracking_uri or tracking_uri(Path.cwd()), args.experiment, args.filter, where)
    if not runs:
        print("error: no pipeline runs found", file=sys.stderr)
        return 1
    paths = write_report(runs, args.out, args.policy)
    print(markdown(comparison_table(runs, args.policy)), end="")
    print(json.dumps({k: str(v) for k, v in paths.items()}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
