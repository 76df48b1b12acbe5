"""The repository the kills run in: a fresh git + DVC copy of the project on the micro profile, and its stage graph."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench.common import ROOT

# Knobs over the micro profile, so that training checkpoints (and a kill can land between them).
KILL_PROFILE = {"teacher": {"samples": 4}, "qa": {"teacher": {"samples": 4}}, "sft": {"max_steps": 16, "save_steps": 4}, "grpo": {"steps": 4, "save_steps": 1}}


def make_micro_repo(repo: Path, env: dict[str, str]) -> None:
    """A fresh git + DVC repo of the project with the micro profile (and KILL_PROFILE) written into params.yaml."""
    import yaml

    from stages.profile import WHOLE

    for name in ("dvc.yaml", "params.yaml", ".gitignore"):
        shutil.copy(ROOT / name, repo / name)
    for name in ("star", "stages", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for profile in (yaml.safe_load((ROOT / "params.micro.yaml").read_text()), KILL_PROFILE):
        params = _merge(params, profile, WHOLE)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    for cmd in ("git init -q", "git config user.email bench@example.com", "git config user.name bench", "dvc init -q", "dvc config core.analytics false", "git add -A", "git commit -qm init"):
        subprocess.run(cmd, shell=True, cwd=repo, env=env, check=True, capture_output=True, timeout=120)


def _merge(base: dict, over: dict, whole: set[str]) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(base.get(k) or {}, v, whole) if isinstance(v, dict) and k not in whole else v
    return out


def dvc_graph(dvc_yaml: Path) -> dict[str, dict[str, list[str]]]:
    """Every stage of dvc.yaml, foreach expanded: {"deps": [...], "outs": [...]} (metrics and plots count as outs)."""
    import yaml

    stages = {}
    for name, stage in yaml.safe_load(dvc_yaml.read_text())["stages"].items():
        items = stage.get("foreach")
        body = stage.get("do", stage)
        expanded = {None: None} if items is None else dict(zip(items, items)) if isinstance(items, list) else items
        for k, item in expanded.items():
            fill = lambda text: str(text).replace("${item}", str(item)).replace("${key}", str(k))  # noqa: E731
            outs = [fill(o if isinstance(o, str) else next(iter(o))) for part in ("outs", "metrics") for o in body.get(part, [])]
            stages[name if k is None else f"{name}@{k}"] = {"deps": [fill(d) for d in body.get("deps", [])], "outs": outs}
    return stages


def upstream_order(graph: dict[str, dict[str, list[str]]], targets: tuple[str, ...]) -> list[str]:
    """The targets and every stage they depend on, each after its dependencies."""
    producer = {out: name for name, stage in graph.items() for out in stage["outs"]}
    order: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        for dep in graph[name]["deps"]:
            for out, other in producer.items():
                if other != name and (dep == out or dep.startswith(out.rstrip("/") + "/")):
                    visit(other)
        order.append(name)

    for target in targets:
        visit(target)
    return order
