#!/usr/bin/env bash
# Downloads the wheels scripts/gpu_check.sh installs on a GPU machine without
# network: trl and datasets at the versions in .venv, and what a machine with
# torch, transformers, accelerate and peft typically lacks besides (datasets'
# dill and multiprocess; the project's polars, pydantic and tenacity).
#
# Usage: scripts/gpu_wheels.sh [DIR]   (default wheels/; make gpu-wheels)
# PY_VERSION (default 3.12, the GPU machine's python3) and PLATFORM
# (default x86_64 manylinux) choose the wheels; about 57 MiB in all.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-wheels}
venv_python=${VENV_PYTHON:-.venv/bin/python}
py_version=${PY_VERSION:-3.12}
packages="trl datasets dill multiprocess pydantic pydantic-core annotated-types typing-inspection typing-extensions tenacity polars polars-runtime-32"

pins=$("$venv_python" - $packages <<'PY'
import sys
from importlib.metadata import version
print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))
PY
)
platforms=""
for p in ${PLATFORM:-manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64}; do
  platforms="$platforms --platform $p"
done
mkdir -p "$dir"
# shellcheck disable=SC2086
"$venv_python" -m pip download -q --no-deps --only-binary=:all: --python-version "$py_version" --implementation cp $platforms -d "$dir" $pins
ls -l "$dir"/*.whl
total=$(du -cb "$dir"/*.whl | tail -1 | cut -f1)
echo "$(ls "$dir"/*.whl | wc -l) wheels, $((total / 1048576)) MiB in $dir/"
if [ "$total" -gt $((64 * 1048576)) ]; then
  echo "warning: over 64 MiB" >&2
fi
