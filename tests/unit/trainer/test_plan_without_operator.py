"""`python -m dflash_trainer.plan` where only dflash-trainer is installed (the trainer and regen
images): a train.yaml is planned; a DFlashRun is refused in one line saying what to do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[3]
# The operator made unimportable, as in an image that installs dflash-trainer alone.
WITHOUT_OPERATOR = """
import runpy, sys
sys.modules["dflash_operator"] = None
sys.argv = ["python -m dflash_trainer.plan", *sys.argv[1:]]
runpy.run_module("dflash_trainer.plan", run_name="__main__")
"""


def run_plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_OPERATOR, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_train_yaml_is_planned_without_the_operator_package() -> None:
    result = run_plan(
        "trainer/configs/debug.yaml", "--device", "cpu", "--world-size", "1", "--gpu-memory", "8Gi"
    )

    assert result.returncode == 0, result.stderr
    assert "total" in result.stdout
    assert "Traceback" not in result.stderr


def test_a_dflashrun_without_the_operator_package_is_refused_saying_what_to_do() -> None:
    result = run_plan("examples/qwen3.6-27b.yaml", "--gpu-memory", "95Gi")

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "dflash-operator" in lines[0] and "train.yaml" in lines[0]
