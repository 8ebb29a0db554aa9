"""The GPU smoke's DFlash vs DFlash2 table (bench/gpu_smoke_compare.py) fails closed: every
figure it lacks (a failed or skipped step, no number, zero, NaN) is named, and the smoke run
exits non-zero with that message; complete, it gives the ratio DFlash2 / DFlash of each."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


def load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # gpu_smoke.py imports gpu_smoke_compare from there
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


compare = load("gpu_smoke_compare")
# What each step of a complete run measured: DFlash first, DFlash2 beside it.
MEASURED: dict[str, dict[str, Any]] = {
    "train": {"step_ms": 100.0, "peak_memory_mib": 800.0},
    "train-dflash2": {"step_ms": 125.0, "peak_memory_mib": 1000.0},
    "eval-builtin": {"acceptance_length": 2.0},
    "eval-builtin-dflash2": {"acceptance_length": 2.5},
    "eval-sampled": {"acceptance_length": 1.6},
    "eval-sampled-dflash2": {"acceptance_length": 1.2},
}


class Report:
    def __init__(self, name: str, figures: dict[str, Any], status: str = "OK") -> None:
        self.name, self.figures, self.status, self.detail = name, figures, status, ""


def reports(**changes: dict[str, Any] | None) -> list[Report]:
    """The complete run's reports; a change of None drops that step's figures (FAILED)."""
    out = []
    for name, figures in MEASURED.items():
        changed = changes.get(name.replace("-", "_"), figures)
        out.append(Report(name, {}, "FAILED") if changed is None else Report(name, changed))
    return out


def test_a_complete_run_gives_every_figure_and_its_ratio() -> None:
    table = compare.build_comparison(reports())

    assert table == {
        "acceptance greedy": {"dflash": 2.0, "dflash2": 2.5, "ratio": 1.25},
        "acceptance T=0.6": {"dflash": 1.6, "dflash2": 1.2, "ratio": 0.75},
        "step time (ms)": {"dflash": 100.0, "dflash2": 125.0, "ratio": 1.25},
        "peak memory (MiB)": {"dflash": 800.0, "dflash2": 1000.0, "ratio": 1.25},
    }
    lines = compare.format_comparison(table)
    assert lines[0] == "| figure | dflash | dflash2 | ratio dflash2 / dflash |"
    assert "| acceptance T=0.6 | 1.6 | 1.2 | 0.750x |" in lines


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"eval_sampled_dflash2": None}, "eval-sampled-dflash2.acceptance_length: None is not "
         "a number (step FAILED)"),
        ({"train_dflash2": {"step_ms": 125.0}}, "train-dflash2.peak_memory_mib: None"),
        ({"eval_builtin": {"acceptance_length": math.nan}}, "eval-builtin.acceptance_length: "
         "nan is not a positive number"),
        ({"train": {"step_ms": 0, "peak_memory_mib": 800.0}}, "train.step_ms: 0 is not a "
         "positive number"),
        ({"eval_sampled": {"acceptance_length": "1.6"}}, "eval-sampled.acceptance_length: '1.6'"),
        ({"eval_builtin_dflash2": {"acceptance_length": True}}, "is not a number"),
    ],
)  # fmt: skip
def test_a_missing_or_unreadable_figure_is_refused_by_name(
    changes: dict[str, Any], named: str
) -> None:
    with pytest.raises(compare.MissingFiguresError, match="lacks 1 figure") as raised:
        compare.build_comparison(reports(**changes))
    assert named in str(raised.value)


def test_a_step_that_never_ran_is_named_and_every_gap_is_listed() -> None:
    partial = [r for r in reports(eval_builtin=None) if r.name != "eval-sampled-dflash2"]
    with pytest.raises(compare.MissingFiguresError, match="lacks 2 figure") as raised:
        compare.build_comparison(partial)
    assert "eval-sampled-dflash2.acceptance_length: the step did not run" in str(raised.value)
    assert "eval-builtin.acceptance_length" in str(raised.value)


def test_the_smoke_run_exits_non_zero_with_the_missing_figure_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every other step OK, one DFlash2 figure missing: the `architectures` step fails, the
    run is not ok, the JSON has no table, and the printout says which figure is missing."""
    smoke_module = load("gpu_smoke")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # main() sets it for --dry-run
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

    def fake_run_all(smoke: Any) -> None:
        for report in reports(eval_sampled_dflash2={"acceptance_length": None}):
            smoke.run_step(report.name, lambda figures=report.figures: figures)
        smoke.run_step("architectures", lambda: smoke_module.compare_architectures(smoke))

    monkeypatch.setattr(smoke_module, "run_all", fake_run_all)
    out = tmp_path / "out"
    code = smoke_module.main(["--dry-run", "--work", str(tmp_path / "work"), str(out)])

    printed = capsys.readouterr().out
    result = json.loads((out / "gpu_smoke.json").read_text())
    assert code == 1 and not result["ok"] and result["failed"] == ["architectures"]
    assert result["architectures"] is None
    assert "DFlash vs DFlash2 table NOT complete (FAILED)" in printed
    assert "eval-sampled-dflash2.acceptance_length: None is not a number (step OK)" in printed
