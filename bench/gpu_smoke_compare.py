"""The GPU smoke's DFlash vs DFlash2 table: the figures both architectures measured in the same
run (same target, data, steps and seed), their ratio DFlash2 / DFlash, and a refusal, naming
each figure and why, when one is missing. The steps that measure them are in gpu_smoke.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ARCHITECTURES = ("dflash", "dflash2")


@dataclass(frozen=True)
class Row:
    """One figure of the table: the step of each architecture that measures it, and its key."""

    name: str
    steps: tuple[str, str]  # (DFlash's step, DFlash2's step)
    key: str


ROWS = (
    Row("acceptance greedy", ("eval-builtin", "eval-builtin-dflash2"), "acceptance_length"),
    Row("acceptance T=0.6", ("eval-sampled", "eval-sampled-dflash2"), "acceptance_length"),
    Row("step time (ms)", ("train", "train-dflash2"), "step_ms"),
    Row("peak memory (MiB)", ("train", "train-dflash2"), "peak_memory_mib"),
)


class MissingFiguresError(ValueError):
    """A figure the table needs is absent or not a positive number; the message names each."""


def _read(
    figures: Mapping[str, Any], step: str, key: str, statuses: Mapping[str, str]
) -> tuple[float, None] | tuple[None, str]:
    status = statuses.get(step)
    if status is None:
        return None, f"{step}.{key}: the step did not run"
    value = figures.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, f"{step}.{key}: {value!r} is not a number (step {status})"
    if not math.isfinite(value) or value <= 0:
        return None, f"{step}.{key}: {value!r} is not a positive number (step {status})"
    return float(value), None


def build_comparison(reports: Iterable[Any]) -> dict[str, dict[str, float]]:
    """`{row: {"dflash": x, "dflash2": y, "ratio": y / x}}` from the steps' reports (objects
    with `name`, `status` and `figures`); MissingFiguresError lists every figure that is not
    there, so the run fails closed."""
    by_name = {report.name: report for report in reports}
    statuses = {name: report.status for name, report in by_name.items()}
    table: dict[str, dict[str, float]] = {}
    missing: list[str] = []
    for row in ROWS:
        values: dict[str, float] = {}
        for arch, step in zip(ARCHITECTURES, row.steps, strict=True):
            figures = by_name[step].figures if step in by_name else {}
            value, why = _read(figures, step, row.key, statuses)
            if value is None:
                missing.append(str(why))
            else:
                values[arch] = value
        if len(values) == len(ARCHITECTURES):
            table[row.name] = {**values, "ratio": round(values["dflash2"] / values["dflash"], 3)}
    if missing:
        raise MissingFiguresError(
            f"the DFlash vs DFlash2 table lacks {len(missing)} figure(s): " + "; ".join(missing)
        )
    return table


def format_comparison(table: Mapping[str, Mapping[str, float]]) -> list[str]:
    """The table as markdown, one row per figure (the form docs/benchmarks.md records)."""
    lines = ["| figure | dflash | dflash2 | ratio dflash2 / dflash |", "|---|---|---|---|"]
    for name, row in table.items():
        lines.append(f"| {name} | {row['dflash']:g} | {row['dflash2']:g} | {row['ratio']:.3f}x |")
    return lines
