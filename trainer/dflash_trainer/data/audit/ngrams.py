"""Per-row statistics of token 4-grams, vectorised over a whole batch: how many of a row's
4-grams repeat an earlier one of the same row (repetition loops), and a fingerprint of the row's
tokens (exact duplicates).

Only windows whose 4 tokens are all counted (supervised, for the tokens gate) and in one row
are used. Keys come from shifted views of the flat id array (no gathers), are compressed once,
and sorted once per batch as uint32 with the row in the low bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Repetition is measured on 4-grams of token ids, as in "seq-rep-4" (Welleck et al. 2019,
# Neural Text Generation with Unlikelihood Training): human text repeats a few percent of its
# 4-grams, a generation stuck in a loop most of them.
NGRAM = 4
# n-gram keys: a polynomial in the ids with a random odd 64-bit multiplier (wrapping), then
# splitmix64's finaliser so that every id reaches the high bits.
_M = 0x9E3779B97F4A7C15
MULTIPLIER = np.uint64(_M)
MULTIPLIER_2 = np.uint64(_M * _M % (1 << 64))
MULTIPLIER_3 = np.uint64(_M * _M * _M % (1 << 64))
MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_2 = np.uint64(0x94D049BB133111EB)
SHIFT_30, SHIFT_27, SHIFT_31, SHIFT_32 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(32)
# Sort keys are uint32 (twice as fast to sort as uint64, measured): the low 14 bits hold the
# row inside the batch, 18 bits of hash are left. False repeats grow as n^2 / 2^19: ~0.8% of
# the 4-grams of a 4,096-token row, ~2% of a 10,000-token one: far under the loop threshold
# (half of them repeated).
ROW_BITS = 14
MAX_ROWS_PER_SORT = 1 << ROW_BITS
ROW_MASK = np.uint32(MAX_ROWS_PER_SORT - 1)
HASH_MASK = np.uint32(0xFFFFFFFF ^ (MAX_ROWS_PER_SORT - 1))


def mix64(keys: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (every input bit reaches every output bit)."""
    z = (keys ^ (keys >> SHIFT_30)) * MIX_1
    z = (z ^ (z >> SHIFT_27)) * MIX_2
    mixed: np.ndarray = z ^ (z >> SHIFT_31)
    return mixed


@dataclass(frozen=True)
class NgramStats:
    ngrams: np.ndarray  # counted 4-grams per row
    repeats: np.ndarray  # of which repeat an earlier 4-gram of the row
    fingerprints: np.ndarray  # uint64 per row: equal for equal counted token sequences


def ngram_stats(
    values: np.ndarray, offsets: np.ndarray, counted: np.ndarray | None = None
) -> NgramStats:
    """4-gram statistics of each row of a flat id array (`offsets`: rows + 1, from 0).

    `counted` (bool per token, e.g. the loss mask) restricts the windows to tokens it marks.
    """
    rows = len(offsets) - 1
    zeros = np.zeros(rows, dtype=np.int64)
    lengths = np.diff(offsets)
    if len(values) < NGRAM:
        return NgramStats(zeros, zeros.copy(), mix64(lengths.astype(np.uint64)))
    v = values.astype(np.uint64, copy=False)
    keys = v[:-3] * MULTIPLIER_3 + v[1:-2] * MULTIPLIER_2 + v[2:-1] * MULTIPLIER + v[3:]
    valid = np.ones(len(keys), dtype=bool)
    if counted is not None:
        c = counted.astype(bool, copy=False)
        valid = c[:-3] & c[1:-2] & c[2:-1] & c[3:]
    # Windows that start in the last 3 tokens of a row cross into the next one.
    crossing = (offsets[1:, None] - np.arange(1, NGRAM)).ravel()
    valid[crossing[(crossing >= 0) & (crossing < len(valid))]] = False
    mixed = mix64(keys[valid])
    position = np.flatnonzero(valid)
    per_row = np.diff(np.searchsorted(position, offsets))
    fingerprints = mix64(per_row.astype(np.uint64) + MULTIPLIER)
    has = per_row > 0
    starts = (np.cumsum(per_row) - per_row)[has]
    fingerprints[has] += np.add.reduceat(mixed, starts)
    repeats = np.zeros(rows, dtype=np.int64)
    row_ids = np.repeat(np.arange(rows, dtype=np.uint32), per_row)
    high = (mixed >> SHIFT_32).astype(np.uint32)
    for first in range(0, rows, MAX_ROWS_PER_SORT):
        last = min(first + MAX_ROWS_PER_SORT, rows)
        lo, hi = int(starts_all(per_row, first)), int(starts_all(per_row, last))
        if hi - lo < 2:
            continue
        local = row_ids[lo:hi] - np.uint32(first)
        key = np.sort((high[lo:hi] & HASH_MASK) | local)
        same = key[1:] == key[:-1]
        repeats[first:last] = np.bincount((key[1:][same] & ROW_MASK), minlength=last - first)
    return NgramStats(per_row.astype(np.int64), repeats, fingerprints)


def starts_all(per_row: np.ndarray, row: int) -> int:
    """Index of `row`'s first window among all counted windows."""
    return int(per_row[:row].sum())
