#!/usr/bin/env bash
# The GPU smoke on a lent, air-gapped GPU machine, in one short command from the repository root
# (docs/benchmarks.md, "GPU smoke"). The kit comes along as .gpu-kit (built here first with
# `bench/gpu_smoke.sh --kit .gpu-kit`), and everything the run returns lands in $OUT as four
# files: gpu_smoke.log, steps.json (rewritten after every step), gpu_smoke.json and
# gpu_smoke_rest.tar.gz (the work folder without weights).
#   bash bench/gpu_smoke_device.sh [--dry-run] [--budget-s S]
#     --dry-run     the CPU rehearsal of the same run (a stand-in machine, no network)
#     --budget-s S  the run's time box (default 480: the device's command limit is 600 s)
# Environment: OUT (default ./gpu-smoke-out), PYTHON (default python3: the machine's own, with
# its torch and transformers), GPU_SMOKE_KIT (default .gpu-kit).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kit="${GPU_SMOKE_KIT:-$repo/.gpu-kit}"
out="${OUT:-$repo/gpu-smoke-out}"
python="${PYTHON:-python3}"
if [[ ! -f "$kit/kit.json" ]]; then
  echo "gpu smoke: no kit at $kit: build it where PyPI is reachable (bench/gpu_smoke.sh --kit .gpu-kit) and carry .gpu-kit" >&2
  exit 2
fi
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-smoke-work.XXXXXX")"
site="$work/.kit-site"
export HF_HUB_OFFLINE=1
# Everything the run prints goes to the log in $OUT as well (the device returns the tail of
# stdout, and the log whole).
{
  echo "gpu smoke: $(date -u +%Y-%m-%dT%H:%M:%SZ), $("$python" --version 2>&1), kit $kit"
  "$python" "$repo/bench/gpu_smoke_kit.py" install "$kit" --site "$site"
  PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" \
    "$python" "$repo/bench/gpu_smoke.py" --work "$work/run" "$@" "$out"
} 2>&1 | tee "$out/gpu_smoke.log"
