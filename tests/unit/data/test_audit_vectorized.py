"""The vectorized per-row statistics agree with a plain per-row Python reading of the same data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from dflash_trainer.data.audit.histogram import IntHistogram, TopValues
from dflash_trainer.data.audit.lists import (
    first_position,
    first_run_start,
    flatten_list,
    longest_run,
    run_sums,
    runs_of_ones,
)


def random_masks(seed: int, rows: int = 300) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rows):
        n = int(rng.integers(0, 40))
        # runs of ones and zeros of random lengths, including empty rows and all-ones rows
        row: list[int] = []
        bit = int(rng.integers(0, 2))
        while len(row) < n:
            row += [bit] * int(rng.integers(1, 9))
            bit ^= 1
        out.append(row[:n])
    return out


def naive_longest(row: list[int]) -> int:
    best = run = 0
    for v in row:
        run = run + 1 if v else 0
        best = max(best, run)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_row_sums_longest_runs_and_first_ones_match_a_per_row_loop(seed: int) -> None:
    rows = random_masks(seed)
    column = pa.array(rows, pa.list_(pa.int8())).slice(7)  # a sliced column, as batches are
    rows = rows[7:]
    flat = flatten_list(column, np.int8)
    runs = runs_of_ones(flat)
    assert run_sums(runs, flat.rows).tolist() == [sum(r) for r in rows]
    assert longest_run(runs, flat.rows).tolist() == [naive_longest(r) for r in rows]
    starts = first_run_start(runs, flat.rows)
    expected = [flat.offsets[i] + r.index(1) if 1 in r else -1 for i, r in enumerate(rows)]
    assert starts.tolist() == expected


def test_first_position_finds_each_rows_first_hit_or_minus_one() -> None:
    rows = [[5, 1, 5], [], [2, 2], [1, 1, 5, 5]]
    flat = flatten_list(pa.array(rows, pa.list_(pa.int32())), np.int32)
    hits = np.flatnonzero(flat.values == 5)
    assert first_position(hits, flat.offsets, flat.rows).tolist() == [0, -1, -1, 7]


def test_null_lists_count_as_empty_rows() -> None:
    flat = flatten_list(pa.array([[1, 1], None, [1]], pa.list_(pa.int8())), np.int8)
    assert run_sums(runs_of_ones(flat), flat.rows).tolist() == [2, 0, 1]


def test_the_integer_histogram_gives_nearest_rank_percentiles_and_the_mode() -> None:
    hist = IntHistogram()
    hist.add(np.array([6] * 87 + list(range(100, 113))))
    assert hist.mode() == (6, 87)
    assert hist.mode_share() == pytest.approx(0.87)
    assert hist.percentile(50) == 6 and hist.percentile(99) == 111 and hist.percentile(100) == 112
    assert hist.count_below(7) == 87


def test_the_most_frequent_text_is_counted_exactly_across_batches() -> None:
    top = TopValues()
    for batch in range(5):
        texts = ["OK."] * 60 + [f"unique {batch} {i}" for i in range(200)]
        top.add(pa.array(texts))
    assert top.top() == ("OK.", 300)
    assert top.top_share() == pytest.approx(300 / 1300)
