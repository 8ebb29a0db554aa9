#!/usr/bin/env bash
# One GPU smoke run of the whole trainer pipeline (bench/gpu_smoke.py; docs/benchmarks.md).
#   bench/gpu_smoke.sh [--dry-run] [OUT_DIR]      OUT_DIR defaults to $OUT, else ./gpu-smoke-out
#   bench/gpu_smoke.sh --kit DIR                  (with PyPI) the wheels an air-gapped machine with
#                                                 torch 2.11 + transformers 5.17 lacks, <= 50 MiB
#   bench/gpu_smoke.sh --offline DIR [--dry-run] [OUT_DIR]
#                                                 (no network) install the kit from DIR with
#                                                 pip --no-index into DIR/site, then run
# Python: $PYTHON if set (e.g. a venv with vLLM); else the repository's .venv, or, with
# --offline, python3 (the machine's own, with its torch and transformers).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
default_python() {
  if [[ -x "$repo/.venv/bin/python" ]]; then echo "$repo/.venv/bin/python"; else echo python3; fi
}
export HF_HUB_OFFLINE=1
case "${1:-}" in
  --kit)
    [[ $# -eq 2 ]] || { echo "usage: bench/gpu_smoke.sh --kit DIR" >&2; exit 2; }
    exec "${python:-$(default_python)}" "$repo/bench/gpu_smoke_kit.py" build "$2"
    ;;
  --offline)
    [[ $# -ge 2 ]] || { echo "usage: bench/gpu_smoke.sh --offline DIR [--dry-run] [OUT_DIR]" >&2; exit 2; }
    kit="$(cd "$2" && pwd)"
    shift 2
    python="${python:-python3}"
    "$python" "$repo/bench/gpu_smoke_kit.py" install "$kit" --site "$kit/site"
    export PYTHONPATH="$kit/site${PYTHONPATH:+:$PYTHONPATH}"
    exec "$python" "$repo/bench/gpu_smoke.py" "$@"
    ;;
esac
exec "${python:-$(default_python)}" "$repo/bench/gpu_smoke.py" "$@"
