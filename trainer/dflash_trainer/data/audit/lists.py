"""Vectorized per-row statistics of Arrow list columns (flat numpy values + row offsets).

No per-row Python: every function here is a handful of whole-array numpy passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class FlatList:
    """A list column as one flat value array and `rows + 1` offsets starting at 0."""

    values: np.ndarray
    offsets: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def flatten_list(column: pa.Array | pa.ChunkedArray, dtype: type[np.generic]) -> FlatList:
    """Zero-copy where possible; null lists count as empty."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_large_list(column.type):
        column = column.cast(pa.list_(column.type.value_type))
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = column.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    if values.null_count:
        values = values.fill_null(0)
    arr = values.to_numpy(zero_copy_only=False)
    if arr.dtype == np.bool_ or arr.dtype != dtype:
        arr = arr.astype(dtype, copy=False)
    return FlatList(arr, offsets - offsets[0])


def row_sums(flat: FlatList) -> np.ndarray:
    """Sum of each row (int64), empty rows give 0."""
    cs = np.zeros(len(flat.values) + 1, dtype=np.int64)
    np.cumsum(flat.values, dtype=np.int64, out=cs[1:])
    sums: np.ndarray = cs[flat.offsets[1:]] - cs[flat.offsets[:-1]]
    return sums


def row_of(positions: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The row each flat position belongs to."""
    return np.searchsorted(offsets, positions, side="right") - 1


@dataclass(frozen=True)
class Runs:
    """Runs of consecutive ones in a 0/1 list column: flat [start, end) and their row."""

    starts: np.ndarray
    ends: np.ndarray
    rows: np.ndarray


def runs_of_ones(flat: FlatList) -> Runs:
    """Every maximal run of ones, never crossing a row boundary."""
    v = flat.values.astype(np.int8, copy=False)
    n = len(v)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Runs(empty, empty, empty)
    boundary = np.zeros(n + 1, dtype=bool)
    boundary[flat.offsets] = True
    d = np.diff(v)
    starts = np.flatnonzero(d == 1) + 1
    ends = np.flatnonzero(d == -1) + 1
    # A change exactly at a row boundary is replaced by the boundary rules below.
    starts = starts[~boundary[starts]]
    ends = ends[~boundary[ends]]
    row_starts = flat.offsets[:-1][flat.lengths > 0]
    row_ends = flat.offsets[1:][flat.lengths > 0]
    starts = np.concatenate([starts, row_starts[v[row_starts] == 1]])
    ends = np.concatenate([ends, row_ends[v[row_ends - 1] == 1]])
    starts.sort()
    ends.sort()
    return Runs(starts, ends, row_of(starts, flat.offsets))


def group_starts(sorted_rows: np.ndarray) -> np.ndarray:
    """Indices where a non-decreasing row array starts a new row."""
    return np.concatenate([[0], np.flatnonzero(np.diff(sorted_rows)) + 1]).astype(np.int64)


def longest_run(runs: Runs, rows: int) -> np.ndarray:
    """Length of the longest run of ones per row (0 for rows without ones)."""
    out = np.zeros(rows, dtype=np.int64)
    if len(runs.starts):
        firsts = group_starts(runs.rows)
        out[runs.rows[firsts]] = np.maximum.reduceat(runs.ends - runs.starts, firsts)
    return out


def first_run_start(runs: Runs, rows: int) -> np.ndarray:
    """Flat position of each row's first one, -1 for rows without ones."""
    out = np.full(rows, -1, dtype=np.int64)
    if len(runs.starts):
        firsts = group_starts(runs.rows)
        out[runs.rows[firsts]] = runs.starts[firsts]
    return out


def first_position(hit: np.ndarray, offsets: np.ndarray, rows: int) -> np.ndarray:
    """Flat position of each row's first True in `hit`, -1 where there is none."""
    out = np.full(rows, -1, dtype=np.int64)
    idx = np.flatnonzero(hit)
    if len(idx):
        r = row_of(idx, offsets)
        firsts = group_starts(r)
        out[r[firsts]] = idx[firsts]
    return out
