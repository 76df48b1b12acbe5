#!/usr/bin/env bash
# GPU check: SFT and GRPO steps of the project's trainers on a ~100M-parameter
# Llama in bf16, with no network; prints one JSON line (tokens/s, step times,
# peak memory) last. See scripts/gpu_check.py.
#
# Usage: scripts/gpu_check.sh [WHEEL_DIR] [gpu_check.py options]
# WHEEL_DIR (default $STAR_WHEELS, else wheels/) holds the wheels of trl,
# datasets and the rest (make gpu-wheels), installed only when not importable.
# PYTHON (default python3) runs it; GPU_CHECK_TIMEOUT (default 470 s) bounds it.
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=${STAR_WHEELS:-wheels}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  wheels=$1
  shift
fi
export PYTHONUNBUFFERED=1
exec timeout -k 10 "${GPU_CHECK_TIMEOUT:-470}" "${PYTHON:-python3}" scripts/gpu_check.py --wheels "$wheels" "$@"
