"""The kills section: kill -9 at random points of stage runs in a fresh micro repo, rerun, compare with the uninterrupted run."""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.fault_harness.kill_checks import RESUME_STATE, TRAINED, close_weights, copy_path, digest, leftovers, state_after_kill
from bench.fault_harness.micro_repo import dvc_graph, make_micro_repo, upstream_order
from bench.fault_harness.stage_runs import mlflow_status, repro
from flows.serve import prefect_server

KILL_STAGES = ("distill", "sft", "grpo", "infer@sft", "qa_distill", "qa_sft", "qa_grpo", "qa_infer@qa_sft")

KILL_ATTEMPTS = 5  # tries per trial when the stage finishes before its kill


def kills(n: int, seed: int = 0, budget_s: float = 25 * 60, stages: tuple[str, ...] = KILL_STAGES) -> dict[str, Any]:
    """kill -9 at random points of stage runs in a fresh micro repo, rerun, compare with the uninterrupted run.

    The kills go to `stages` in turn (n = 10 covers the eight of KILL_STAGES, distill and sft twice);
    only those stages and what they depend on run uninterrupted first.

    Counted per kill: landed (the stage was still running), resumed (the rerun
    finished), resumed_from_state (the kill left progress rows or checkpoints),
    identical (every compared output equals the uninterrupted run's bytes),
    close (sft/grpo: not the same bytes, same tensors within 1e-4), half
    outputs (an output under its final name that differs from the reference
    right after the kill), temporary siblings, and stage runs left RUNNING in
    MLflow after the rerun. Training curves (reports/train/*.csv) hold
    timings, so they are not compared.
    """
    if n <= 0:
        print("kills: skipped (--kills 0)")
        return {"skipped": True}
    if shutil.which("dvc", path=str(Path(sys.executable).parent)) is None or shutil.which("prefect", path=str(Path(sys.executable).parent)) is None:
        print("kills: skipped (dvc or prefect not found beside the interpreter)")
        return {"skipped": True, "reason": "dvc or prefect not found"}
    start = time.perf_counter()
    rng = random.Random(f"{seed}:kills")
    work = Path(tempfile.mkdtemp(prefix="star-kills-"))
    repo, ref = work / "repo", work / "reference"
    repo.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_"))}
    env.update(PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", PREFECT_HOME=str(work / "prefect"), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    trials: list[dict] = []
    error = None
    try:
        make_micro_repo(repo, env)
        graph = dvc_graph(repo / "dvc.yaml")
        with prefect_server(work / "prefect", env, str(Path(sys.executable).parent / "prefect")) as url:
            env["PREFECT_API_URL"] = url
            # The uninterrupted runs: every stage the kill targets need, once, timed.
            lifetimes: dict[str, float] = {}
            schedule = [stages[i % len(stages)] for i in range(n)]
            for stage in upstream_order(graph, tuple(dict.fromkeys(schedule))):
                r = repro(repo, env, stage, force=False)
                if r["rc"] != 0:
                    raise RuntimeError(f"reference run of {stage} failed:\n{r['output']}")
                lifetimes[stage] = r["lifetime_s"] or 0.0
                print(f"kills: reference {stage} in {lifetimes[stage]:.1f} s")
            for stage in set(schedule):
                for out in graph[stage]["outs"]:
                    copy_path(repo / out, ref / out)
            lock = (repo / "dvc.lock").read_text()
            for i, stage in enumerate(schedule):
                if time.perf_counter() - start > budget_s:
                    print(f"kills: time budget spent after {i} kills")
                    break
                outs = graph[stage]["outs"]
                fraction = rng.uniform(0.1, 0.9)
                for attempt in range(1, KILL_ATTEMPTS + 1):
                    killed = repro(repo, env, stage, kill_after=fraction * lifetimes[stage])
                    if killed["killed"] or killed["rc"] != 0 or attempt == KILL_ATTEMPTS:
                        break
                    # It finished before the kill: on a shared machine a stage may run faster than its
                    # reference did. Aim at the same fraction of the run just seen, from a clean start.
                    print(f"kills: {stage} finished in {killed['lifetime_s'] or 0:.1f} s, before the kill at {fraction * lifetimes[stage]:.1f} s; again")
                    lifetimes[stage] = killed["lifetime_s"] or lifetimes[stage]
                    if stage in RESUME_STATE:
                        shutil.rmtree(repo / RESUME_STATE[stage], ignore_errors=True)
                trial: dict[str, Any] = {"stage": stage, "kill_at": round(fraction, 2), "attempts": attempt, "landed": killed["killed"] and killed["rc"] != 0}
                # Right after the kill: outputs under their final names, temporary siblings, resumable state, runs RUNNING.
                compared = [o for o in outs if not o.startswith("reports/train/")]
                trial["half_outputs"] = sum((repo / o).exists() and digest(repo / o) != digest(ref / o) and not (o in TRAINED.values() and close_weights(repo / o, ref / o)) for o in compared)
                trial["tmp_after_kill"] = leftovers(repo, outs)
                trial["state_after_kill"] = state_after_kill(repo, stage)
                trial["running_after_kill"] = mlflow_status(repo).get("RUNNING", 0)
                rerun = repro(repo, env, stage)
                trial["resumed"] = rerun["rc"] == 0
                trial["resumed_from_state"] = trial["resumed"] and trial["state_after_kill"] > 0
                same = {o: digest(repo / o) == digest(ref / o) for o in compared}
                trial["identical"] = trial["resumed"] and all(same.values())
                trial["close"] = trial["resumed"] and all(same[o] or (o in TRAINED.values() and close_weights(repo / o, ref / o)) for o in compared)
                if trial["resumed"] and not trial["identical"]:
                    trial["differs"] = [o for o, s in same.items() if not s]
                trial["tmp_after_rerun"] = leftovers(repo, outs)
                status = mlflow_status(repo)
                trial["running_after_rerun"] = status.get("RUNNING", 0)
                trial["killed_runs"] = status.get("KILLED", 0)
                if not trial["resumed"]:
                    trial["rerun_output"] = rerun["output"][-1500:]
                trials.append(trial)
                print(f"kills: {stage} killed at {fraction:.0%} (landed {trial['landed']}), state {trial['state_after_kill']}, rerun ok {trial['resumed']}, identical {trial['identical']}, close {trial['close']}, half {trial['half_outputs']}, RUNNING {trial['running_after_rerun']}")
                # Put the uninterrupted outputs back and clear what this trial left, so every trial starts alike.
                for out in outs:
                    copy_path(ref / out, repo / out)
                for d in {(repo / o).parent for o in outs}:
                    for p in [*d.glob(".tmp-*"), *d.glob(".old-*")] if d.exists() else []:
                        shutil.rmtree(p) if p.is_dir() else p.unlink()
                if stage in RESUME_STATE:
                    shutil.rmtree(repo / RESUME_STATE[stage], ignore_errors=True)
                (repo / "dvc.lock").write_text(lock)
    except Exception as exc:  # report what was measured, and why it stopped
        error = f"{type(exc).__name__}: {exc}"[-2000:]
        print(f"kills: stopped: {error}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    landed = [t for t in trials if t["landed"]]
    return {
        "requested": n,
        "trials": len(trials),
        "landed": len(landed),
        "resumed": sum(t["resumed"] for t in landed),
        "resumed_from_state": sum(t["resumed_from_state"] for t in landed),
        "identical": sum(t["identical"] for t in landed),
        "close": sum(t["close"] for t in landed),
        "half_outputs": sum(t["half_outputs"] for t in landed),
        "tmp_after_kill": sum(t["tmp_after_kill"] for t in landed),
        "tmp_after_rerun": sum(t["tmp_after_rerun"] for t in landed),
        "running_after_rerun": max((t["running_after_rerun"] for t in trials), default=0),
        "identical_rate": sum(t["identical"] for t in landed) / max(len(landed), 1),
        "seconds": round(time.perf_counter() - start, 1),
        "error": error,
        "by_trial": trials,
    }
