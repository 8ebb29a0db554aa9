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
# n-gram keys: a polynomial in the ids with a random odd 32-bit multiplier (wrapping), then
# murmur3's 32-bit finaliser so that every id reaches the high bits. 32-bit arithmetic halves
# the memory traffic of the 64-bit version (measured 2x faster); the sort keeps 18 bits anyway.
_M = 0x9E3779B1
MULTIPLIER = np.uint32(_M)
MULTIPLIER_2 = np.uint32(_M * _M % (1 << 32))
MULTIPLIER_3 = np.uint32(_M * _M * _M % (1 << 32))
FMIX_1, FMIX_2 = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)
SHIFT_16, SHIFT_13 = np.uint32(16), np.uint32(13)
# Sort keys are uint32: the low 14 bits hold the row inside the batch, 18 bits of hash are
# left. False repeats grow as n^2 / 2^19: ~0.8% of the 4-grams of a 4,096-token row, ~2% of a
# 10,000-token one: far under the loop threshold (half of them repeated).
ROW_BITS = 14
MAX_ROWS_PER_SORT = 1 << ROW_BITS
ROW_MASK = np.uint32(MAX_ROWS_PER_SORT - 1)
HASH_MASK = np.uint32(0xFFFFFFFF ^ (MAX_ROWS_PER_SORT - 1))
FINGERPRINT_SEED = np.uint64(0x9E3779B97F4A7C15)


def fmix32(keys: np.ndarray) -> np.ndarray:
    """murmur3's finaliser (every input bit reaches every output bit), in place."""
    keys ^= keys >> SHIFT_16
    keys *= FMIX_1
    keys ^= keys >> SHIFT_13
    keys *= FMIX_2
    keys ^= keys >> SHIFT_16
    return keys


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
    if len(values) < NGRAM:
        return NgramStats(zeros, zeros.copy(), np.zeros(rows, dtype=np.uint64))
    # int32 ids are reinterpreted, not copied; keys are built only where windows count.
    v = values.view(np.uint32) if values.dtype == np.int32 else values.astype(np.uint32)
    valid = np.ones(len(v) - (NGRAM - 1), dtype=bool)
    if counted is not None:
        c = counted.view(bool) if counted.dtype in (np.int8, np.uint8) else counted.astype(bool)
        valid = c[:-3] & c[1:-2] & c[2:-1] & c[3:]
    # Windows that start in the last 3 tokens of a row cross into the next one.
    crossing = (offsets[1:, None] - np.arange(1, NGRAM)).ravel()
    valid[crossing[(crossing >= 0) & (crossing < len(valid))]] = False
    position = np.flatnonzero(valid)
    mixed = v[position] * MULTIPLIER_3
    mixed += v[1:][position] * MULTIPLIER_2
    mixed += v[2:][position] * MULTIPLIER
    mixed += v[3:][position]
    fmix32(mixed)
    per_row = np.diff(np.searchsorted(position, offsets))
    # Fingerprint: the sum of the row's 4-gram hashes (64-bit, so sums do not wrap) and
    # their count: equal token sequences, equal fingerprints.
    fingerprints = per_row.astype(np.uint64) * FINGERPRINT_SEED
    has = per_row > 0
    starts = (np.cumsum(per_row) - per_row)[has]
    if len(mixed):
        fingerprints[has] += np.add.reduceat(mixed, starts, dtype=np.uint64)
    repeats = np.zeros(rows, dtype=np.int64)
    row_ids = np.repeat(np.arange(rows, dtype=np.uint32), per_row)
    for first in range(0, rows, MAX_ROWS_PER_SORT):
        last = min(first + MAX_ROWS_PER_SORT, rows)
        lo, hi = starts_all(per_row, first), starts_all(per_row, last)
        if hi - lo < 2:
            continue
        local = row_ids[lo:hi] - np.uint32(first)
        key = np.sort((mixed[lo:hi] & HASH_MASK) | local)
        same = key[1:] == key[:-1]
        repeats[first:last] = np.bincount((key[1:][same] & ROW_MASK), minlength=last - first)
    return NgramStats(per_row.astype(np.int64), repeats, fingerprints)


def starts_all(per_row: np.ndarray, row: int) -> int:
    """Index of `row`'s first window among all counted windows."""
    return int(per_row[:row].sum())
