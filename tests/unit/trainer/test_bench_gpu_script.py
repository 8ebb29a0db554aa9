"""The prepared GPU benchmark runs end to end on CPU with --tiny (same code path, toy shapes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "bench_trainer_gpu.py"


def test_the_gpu_benchmark_script_runs_with_tiny_shapes_on_cpu() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--tiny", "--steps", "2", "--warmup", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MFU" in done.stdout
    assert "RATIO train step / target forward:" in done.stdout
