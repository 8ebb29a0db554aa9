#!/usr/bin/env bash
# One GPU smoke run of the whole trainer pipeline (bench/gpu_smoke.py; docs/benchmarks.md).
#   bench/gpu_smoke.sh [--dry-run] [OUT_DIR]      OUT_DIR defaults to $OUT, else ./gpu-smoke-out
# Python: $PYTHON if set (e.g. a venv with vLLM), else the repository's .venv, else python3.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi
export HF_HUB_OFFLINE=1
exec "$python" "$repo/bench/gpu_smoke.py" "$@"
