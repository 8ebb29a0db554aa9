"""What every gate's metrics look like: per-source counters, groups (overall + each source).

The gate-specific math lives in `metrics_completions`, `metrics_tokens` and `metrics_prompts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from dflash_trainer.data.audit.histogram import HIST_CAP, IntHistogram

OVERALL = "__overall__"
# Above this many (source, value) cells a batch's 2-D histogram would cost more than it saves.
MAX_GRID_CELLS = 1 << 22
NO_SOURCE = "(no source column)"


@dataclass
class GroupMetrics:
    """One group's numbers: `values` are what checks compare, `details` is for the report."""

    samples: int
    values: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    # check -> (events, trials) behind a rate or quantile value, for the confidence bound.
    counts: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class GateMetrics:
    gate: str
    overall: GroupMetrics
    sources: dict[str, GroupMetrics]
    # plot name -> group (source name or OVERALL) -> histogram
    histograms: dict[str, dict[str, IntHistogram]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class SourceIndex:
    """Stable small integers for source names, across batches."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}

    def id_of(self, name: str) -> int:
        if name not in self._ids:
            self._ids[name] = len(self.names)
            self.names.append(name)
        return self._ids[name]

    def encode(self, column: pa.Array | pa.ChunkedArray | None, rows: int) -> np.ndarray:
        """Per-row source ids; a missing column puts every row in one group."""
        if column is None:
            return np.full(rows, self.id_of(NO_SOURCE), dtype=np.int64)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not pa.types.is_dictionary(column.type):
            if column.null_count:
                column = column.fill_null("(null)")
            column = column.dictionary_encode()
        lookup = np.array(
            [self.id_of(str(v)) for v in column.dictionary.to_pylist()], dtype=np.int64
        )
        ids: np.ndarray = lookup[column.indices.to_numpy(zero_copy_only=False).astype(np.int64)]
        return ids


class Counters:
    """Named per-source sums that grow as new sources appear."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.sums: dict[str, np.ndarray] = {n: np.zeros(0, dtype=np.float64) for n in names}

    def add(self, name: str, src: np.ndarray, weights: np.ndarray | None, sources: int) -> None:
        counted = np.bincount(src, weights=weights, minlength=sources).astype(np.float64)
        current = self.sums[name]
        if len(current) < len(counted):
            current = np.concatenate([current, np.zeros(len(counted) - len(current))])
        current[: len(counted)] += counted
        self.sums[name] = current

    def get(self, name: str, source: int) -> float:
        arr = self.sums[name]
        return float(arr[source]) if source < len(arr) else 0.0

    def total(self, name: str) -> float:
        return float(self.sums[name].sum())


QUANTILES = (10, 50)


def length_floors(
    prefix: str, hist: IntHistogram, thresholds: Any
) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    """(counts, values) of the quantile-floor checks `<prefix>_p10` / `<prefix>_p50`: the rows
    under each floor (`min_<prefix>_p10` of the thresholds) for the confidence bound, and the
    percentiles themselves for the report."""
    counts: dict[str, tuple[float, float]] = {}
    values: dict[str, float] = {}
    for q in QUANTILES:
        floor = getattr(thresholds, f"min_{prefix}_p{q}")
        counts[f"{prefix}_p{q}"] = (float(hist.count_below(floor)), float(hist.total))
        values[f"{prefix}_p{q}"] = float(hist.percentile(q))
    return counts, values


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def add_histograms(
    store: dict[str, IntHistogram], values: np.ndarray, src: np.ndarray, names: list[str]
) -> None:
    """Add `values` to the histogram of each row's source: one 2-D bincount per batch."""
    if len(values) == 0:
        return
    clipped = np.clip(values, 0, HIST_CAP)
    width = int(clipped.max()) + 1
    sources = int(src.max()) + 1
    if sources * width > MAX_GRID_CELLS:  # many sources and long values: one source at a time
        for s in np.unique(src):
            chosen = src == s
            store.setdefault(names[int(s)], IntHistogram()).add(values[chosen])
        return
    grid = np.bincount(src * width + clipped, minlength=sources * width).reshape(sources, width)
    present = np.flatnonzero(grid.sum(axis=1))
    # Each source's largest value is its last non-empty bin, unless it overflowed the cap.
    last = width - 1 - np.argmax(grid[:, ::-1] > 0, axis=1)
    overflow = width - 1 == HIST_CAP
    for s in present:
        top = int(values[src == s].max()) if overflow else int(last[s])
        store.setdefault(names[int(s)], IntHistogram()).add_counts(grid[s], top)


def overall_histogram(per_source: dict[str, IntHistogram]) -> IntHistogram:
    total = IntHistogram()
    for hist in per_source.values():
        if len(hist.counts) > len(total.counts):
            grown = hist.counts.copy()
            grown[: len(total.counts)] += total.counts
            total.counts = grown
        else:
            total.counts[: len(hist.counts)] += hist.counts
        total.max_value = max(total.max_value, hist.max_value)
    return total
