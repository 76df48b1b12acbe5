"""The secrets section: a planted OPENAI_API_KEY, the pieces that see it, and a search of every byte they wrote.

The key belongs only in the Authorization header the local server receives.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets as secrets_module
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.fault_harness.capture import captured_output, count_key, environment
from bench.fault_harness.clients import CLIENTS, backend_client, formatter_client, outcome_of, teacher_client
from bench.fault_harness.corpus import Corpus
from bench.fault_harness.fault_server import FaultServer
from star.travel.specs import SynthesisSpec, WorldSpec
from star.travel.world.synthesize import Synthesizer
from star.travel.world.synthetic import generate_world


def secrets(corpus: Corpus, stage: bool = False, leak: Callable[[str, Path], None] | None = None) -> dict[str, Any]:
    """Plant a key, run the pieces that see it, search everything they wrote.

    In-process, from a working directory inside a temporary folder: the
    teacher, the llm formatter and the OpenAI backend against a recording
    server; a `stage_run` logging params, metrics, a dict and an artifact to a
    temporary sqlite MLflow store. Apart from that, each client once more
    against a server whose 400 body echoes the Authorization header (some
    servers do): the project's messages must not pass the key on. With
    `stage`, the real distill stage runs in a subprocess with teacher.kind
    openai, its own Prefect home and MLflow store, its stdout and stderr kept.
    `leak(key, dir)` is for the tests: a deliberately leaky piece, to show
    the search finds it.
    """
    key = f"sk-PLANTED-{secrets_module.token_hex(16)}"
    server = FaultServer("record")
    tmp = Path(tempfile.mkdtemp(prefix="star-secrets-"))
    cwd, outputs = tmp / "cwd", tmp / "outputs"
    cwd.mkdir()
    outputs.mkdir()
    texts: dict[str, str] = {}
    echoed: dict[str, str] = {}
    stage_result = None
    start = time.perf_counter()
    try:
        clean = dict(MLFLOW_TRACKING_URI=None, DVC_ROOT=None, DVC_EXP_NAME=None, DVC_STAGE=None, DVC_EXP_BASELINE_REV=None)
        with environment(OPENAI_API_KEY=key, **clean), contextlib.chdir(cwd):
            with captured_output() as log:
                # answered: the key goes out in the Authorization header only
                row = teacher_client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY")()
                plan = formatter_client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY")()
                generation = backend_client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY")()
                (outputs / "trajectories.jsonl").write_text(json.dumps(row, sort_keys=True) + "\n")
                (outputs / "plans.jsonl").write_text(json.dumps(plan.to_submission()) + "\n")
                (outputs / "generation.json").write_text(json.dumps(generation[0].text))
                # a stage run: params, metrics, a dict and an artifact, to a temporary store
                import mlflow

                from star.tracking import stage_run
                from star.travel.specs import TeacherParams

                params = {"teacher": TeacherParams.model_validate({"kind": "openai", "openai": {"base_url": server.base_url}}).model_dump(mode="json")}
                previous = mlflow.get_tracking_uri()
                with stage_run("distill", params, tmp):
                    mlflow.log_metrics({"trajectories": 1.0})
                    mlflow.log_dict({"row": row}, "distill_metrics.json")
                    mlflow.log_artifact(str(outputs / "trajectories.jsonl"))
                    artifact_uri = mlflow.get_artifact_uri()
                mlflow.set_tracking_uri(previous)  # stage_run points the process at the temporary store
                if leak is not None:
                    leak(key, outputs)
            texts["logs"] = log.getvalue()
            with captured_output() as echo_log:
                for name, client in CLIENTS.items():
                    _, _, message = outcome_of(client(server.base_url, corpus, 5.0, 0, key_env="OPENAI_API_KEY", model="echo"))
                    echoed[name] = message
                    print(f"error: {name}: {message}", file=sys.stderr)  # as run_stage reports a ServiceError
        if stage:
            stage_result = _secrets_stage(key, server, tmp / "stage")
            texts["stage_output"] = stage_result.pop("output")
        found = count_key(key, tmp, texts)
        files = [f for f in tmp.rglob("*") if f.is_file()]
        prefect_files = [f for f in files if "prefect" in f.relative_to(tmp).parts]
        echo_found = count_key(key, None, {"echo_logs": echo_log.getvalue(), **{f"echo_{k}": v for k, v in echoed.items()}})
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    expected = sum(r["auth"].count(key) for r in server.requests)
    in_bodies = sum(r["body"].count(key) for r in server.requests)
    if in_bodies:
        found["request_bodies"] = in_bodies
    leaks, echo_leaks = sum(found.values()), sum(echo_found.values())
    # star.tracking asks for <store>/mlartifacts; where did this stage run's artifacts go?
    artifacts = artifact_uri.removeprefix("file://")
    inside = Path(artifacts).resolve().is_relative_to((tmp / "mlartifacts").resolve())
    place = Path(artifacts).relative_to(tmp) if Path(artifacts).is_relative_to(tmp) else artifacts
    print(f"secrets: searched {len(files)} files ({len(prefect_files)} in the Prefect home) and {len(texts)} captured outputs")
    print(f"secrets: {leaks} leak(s) of the planted key; {expected} in Authorization headers of {len(server.requests)} requests (expected)")
    print(f"secrets: server echoing the key in a 400: {echo_leaks} occurrence(s) in our messages and logs")
    for name, message in echoed.items():
        print(f"  rejected {name}: {message[:200]}")
    print(f"secrets: the stage run's artifacts went to {place} ({'the store' if inside else 'NOT <store>/mlartifacts'})")
    result = {
        "leaks": leaks,
        "leaks_by_place": found,
        "echo_leaks": echo_leaks,
        "echo_leaks_by_place": echo_found,
        "authorization_headers": expected,
        "requests": len(server.requests),
        "artifacts_in_store": inside,
        "files_scanned": len(files),
        "prefect_files_scanned": len(prefect_files),
        "seconds": round(time.perf_counter() - start, 1),
    }
    if stage_result is not None:
        result["stage"] = stage_result
    return result


def _secrets_stage(key: str, server: FaultServer, work: Path) -> dict[str, Any]:
    """The real distill stage (teacher.kind openai) in a subprocess: its logs, MLflow store and Prefect home."""
    import yaml

    work.mkdir(parents=True)
    world = generate_world(WorldSpec(seed=0, states=2, cities_per_state=3, num_dates=5))
    world.save(work / "data" / "world")
    queries = Synthesizer(world, SynthesisSpec(sizes={"train": 2, "validation": 0, "test": 0})).run()["train"]
    (work / "data" / "queries").mkdir(parents=True)
    (work / "data" / "queries" / "train.jsonl").write_text("".join(json.dumps(q.to_row()) + "\n" for q in queries))
    params = {
        "teacher": {"kind": "openai", "openai": {"base_url": server.base_url, "model": "m", "timeout": 10.0, "retries": 0, "concurrency": 1, "max_tokens": 16}},
        "env": {"max_turns": 2},
    }
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_", "PREFECT_"))}
    env.update(OPENAI_API_KEY=key, PYTHONPATH=str(ROOT), PREFECT_HOME=str(work / "prefect"), HOME=str(work / "home"), PYTHONUNBUFFERED="1")
    (work / "home").mkdir()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "stages.distill"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - t0
    print(f"secrets: distill stage subprocess exit {proc.returncode} in {seconds:.1f} s")
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
    return {"rc": proc.returncode, "seconds": round(seconds, 1), "output": proc.stdout + proc.stderr}
