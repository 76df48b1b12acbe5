"""Run one DVC stage: validate its params, then run its flow inside an MLflow run."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from star.config import ParamsError, load_params
from star.sections import DOMAINS, layout
from star.service import ServiceError

PARAMS_FILE = "params.yaml"
PACKAGES = ("star", "flows", "stages")
# A directory: each stage run writes there the project files it imported, so a test can
# check them against the stage's deps in dvc.yaml (tests/test_pipeline_micro.py).
RECORD_IMPORTS = "STAR_RECORD_IMPORTS"
# The variables that give a process its global rank under torchrun (`accelerate launch`) or MPI.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "PMI_RANK")


PROGRESS = Path("data/.progress")  # where fanned-out stages keep their finished chunks until they end


# Where the data splits live: a stage argument naming a .jsonl file in one of these is
# a file the stage reads, logged as a dataset input of its MLflow run.
DATASET_DIRS = tuple(path.as_posix() for where in map(layout, DOMAINS) for path in (where.tasks, where.sft))


def wants_vllm(section: str, key: str = "backend") -> bool:
    """Whether params.yaml sets `section.key` to vllm (read raw: a malformed file is reported by run_stage)."""
    import yaml

    try:
        return (yaml.safe_load(Path(PARAMS_FILE).read_text()) or {}).get(section, {}).get(key) == "vllm"
    except (OSError, yaml.YAMLError, AttributeError):
        return False


def run_with_vllm(name: str) -> None:
    """Go on in an interpreter that has vLLM (star.venvs): this one, $STAR_VLLM_PYTHON or .venv-vllm's."""
    from star.venvs import run_with_vllm as rerun

    rerun(f"{name}: backend vllm", sys.orig_argv[1:])


def domain_argument(position: int = 1) -> str:
    """The domain a stage runs for: its command line's argument at `position`, travel by default."""
    return sys.argv[position] if len(sys.argv) > position else "travel"


def main_process() -> bool:
    """False in all but the first process of a multi-process run (`accelerate launch`)."""
    return next((os.environ[v] for v in RANK_VARS if os.environ.get(v)), "0") == "0"


def datasets_read(arguments: dict[str, Any]) -> dict[str, tuple[Path, str]]:
    """{name: (path, context)} of the split files among a stage's arguments, named by
    their path under data/ ("queries/test"); a train split is training data, any other
    split (validation, test) evaluation data."""
    found = {}
    for value in arguments.values():
        if isinstance(value, Path) and value.suffix == ".jsonl" and value.parent.as_posix() in DATASET_DIRS:
            name = value.relative_to("data").with_suffix("").as_posix()
            found[name] = (value, "training" if value.stem == "train" else "evaluation")
    return found


def record_imports(root: Path, directory: Path) -> None:
    """Write `<module> <args>.txt`: the project's source files now in `sys.modules`, one per line."""
    files = set()
    for module in list(sys.modules.values()):
        path = Path(getattr(module, "__file__", None) or "").resolve()
        if path.suffix == ".py" and path.is_relative_to(root) and path.relative_to(root).parts[0] in PACKAGES:
            files.add(path.relative_to(root).as_posix())
    directory.mkdir(parents=True, exist_ok=True)
    name = " ".join([sys.modules["__main__"].__spec__.name, *sys.argv[1:]])
    (directory / f"{name}.txt").write_text("".join(f"{f}\n" for f in sorted(files)))


def run_stage(
    name: str,
    sections: list[str],
    flow: Callable[..., dict[str, Any]],
    artifacts: list[Path] = (),
    replica: Callable[..., Any] | None = None,
    domain: str | None = None,
    check_inputs: str | None = None,
    **outputs: Any,
) -> None:
    """`flow` gets each section as a keyword argument plus `outputs`, and returns metrics.

    With `domain` (travel, qa or a module path, see star/domain.py) the domain's own
    sections are read too, and `flow` gets the domain object, built on its layout's world;
    with `check_inputs` (the stage: world, synthesize) its input files are read first (`Domain.check_inputs`).

    Files in `artifacts` that exist afterwards are logged to the stage's MLflow run, and
    the data splits among `outputs` (see `datasets_read`) as its dataset inputs.

    Under `accelerate launch` with several processes, the first one runs `flow` as above;
    the others call `replica` with the same arguments, outside Prefect and MLflow: it
    trains beside the first process, which alone tracks the run and writes the outputs.
    A stage without a `replica` refuses to run in several processes.
    """
    root = Path.cwd()
    try:
        kind = None
        if domain:
            from star.domain import load_domain

            kind = load_domain(domain)
        extra = [s for s in kind.sections if s not in sections] if kind else []
        params = load_params(root / PARAMS_FILE, [*sections, *extra], domain)
        logged = params
        if kind is not None:
            instance = kind({s: params[s] for s in kind.sections}, layout(domain).world)
            if check_inputs:  # a bad input file: one line now, rather than a traceback from inside the flow
                instance.check_inputs(check_inputs)
            params = {**{s: params[s] for s in sections}, "domain": instance}
    except (ParamsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)

    if not main_process():
        if replica is None:
            print(f"error: {name}: this stage runs in one process only, not under a multi-process launch", file=sys.stderr)
            sys.exit(2)
        replica(**params, **outputs)
        return

    import mlflow

    from star.tracking import log_datasets, stage_run

    try:
        with stage_run(name, {k: v.model_dump(mode="json") for k, v in logged.items()}, root, PARAMS_FILE):
            log_datasets(datasets_read(outputs))
            metrics = flow(**params, **outputs) or {}
            mlflow.log_metrics({k: float(v) for k, v in metrics.items()})
            mlflow.log_dict(metrics, f"{name}_metrics.json")
            for path in artifacts:
                if Path(path).is_file():
                    mlflow.log_artifact(str(path))
    except ServiceError as exc:  # a dead or failing server: one line, not a traceback
        print(f"error: {name}: {exc}", file=sys.stderr)
        sys.exit(ServiceError.exit_code)
    if os.environ.get(RECORD_IMPORTS):
        record_imports(root.resolve(), Path(os.environ[RECORD_IMPORTS]))
