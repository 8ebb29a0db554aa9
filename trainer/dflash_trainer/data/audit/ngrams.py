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
# n-gram keys: a polynomial in the ids with the golden-ratio multiplier (wrapping), then one more
# multiplication by it (Fibonacci hashing, Knuth TAOCP 6.4): a difference in the low bits (the
# last id of the window) reaches the high bits that the sort keeps. 32-bit arithmetic halves the
# memory traffic of a 64-bit key (measured 2x faster); the sort keeps 18 bits anyway.
_M = 0x9E3779B1
MULTIPLIER = np.uint32(_M)
MULTIPLIER_2 = np.uint32(_M * _M % (1 << 32))
MULTIPLIER_3 = np.uint32(_M * _M * _M % (1 << 32))
# Sort keys are uint32: the low 14 bits hold the row inside the batch, 18 bits of hash are
# left. False repeats grow as n^2 / 2^19: ~0.8% of the 4-grams of a 4,096-token row, ~2% of a
# 10,000-token one: far under the loop threshold (half of them repeated).
ROW_BITS = 14
MAX_ROWS_PER_SORT = 1 << ROW_BITS
ROW_MASK = np.uint32(MAX_ROWS_PER_SORT - 1)
HASH_MASK = np.uint32(0xFFFFFFFF ^ (MAX_ROWS_PER_SORT - 1))
FINGERPRINT_SEED = np.uint64(0x9E3779B97F4A7C15)


# Keys are computed in blocks that stay in the CPU cache with their temporaries: 3.5x faster
# than whole-array passes over a batch of millions of tokens (measured on a 2-core VM).
CACHE_BLOCK = 1 << 18
# Sorting many small blocks of whole rows beats one big sort (fewer levels, cache-resident).
SORT_BLOCK = 1 << 16


def contiguous_keys(v: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """uint32 hash of the 4 ids starting at each position where `valid` holds, in order:
    computed from shifted views (no gathers), block by block, then compressed once."""
    n = len(v) - (NGRAM - 1)
    keys = np.empty(n, dtype=np.uint32)
    pairs = np.empty(min(n, CACHE_BLOCK) + 2, dtype=np.uint32)
    for lo in range(0, n, CACHE_BLOCK):
        hi = min(lo + CACHE_BLOCK, n)
        # pair[i] = v[i] * M + v[i+1]; key[i] = pair[i] * M^2 + pair[i+2] = the 4-id polynomial
        pair = pairs[: hi - lo + 2]
        np.multiply(v[lo : hi + 2], MULTIPLIER, out=pair)
        pair += v[lo + 1 : hi + 3]
        out = keys[lo:hi]
        np.multiply(pair[:-2], MULTIPLIER_2, out=out)
        out += pair[2:]
    mixed: np.ndarray = keys[valid]
    mixed *= MULTIPLIER
    return mixed


def _window_starts(ends: np.ndarray, n: int) -> np.ndarray:
    """Valid window starts of a flat array cut into pieces ending at `ends`: a window that
    starts in the last 3 tokens of a piece crosses into the next one."""
    valid = np.ones(max(n - (NGRAM - 1), 0), dtype=bool)
    crossing = (ends[:, None] - np.arange(1, NGRAM)).ravel()
    valid[crossing[(crossing >= 0) & (crossing < len(valid))]] = False
    return valid


def _keys_of_rows(
    v: np.ndarray, offsets: np.ndarray, counted: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Keys of the windows inside each row (all of a row's tokens, or those `counted` marks)."""
    valid = _window_starts(offsets[1:], len(v))
    if counted is None:
        per_row = np.maximum(np.diff(offsets) - (NGRAM - 1), 0)
    else:
        c = counted.view(bool) if counted.dtype in (np.int8, np.uint8) else counted.astype(bool)
        valid &= c[:-3] & c[1:-2] & c[2:-1] & c[3:]
        per_row = np.diff(np.searchsorted(np.flatnonzero(valid), offsets))
    return contiguous_keys(v, valid), per_row


def _keys_of_runs(
    v: np.ndarray,
    counted: np.ndarray,
    runs: tuple[np.ndarray, np.ndarray, np.ndarray],
    rows: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Keys of the windows inside each run of counted tokens, computed on the counted tokens
    alone (compressed once): the keys of a prompt are never computed (half the tokens of a
    chat dataset). Runs never cross a row, so the windows are the same as `_keys_of_rows`."""
    starts, ends, run_rows = runs
    c = counted.view(bool) if counted.dtype in (np.int8, np.uint8) else counted.astype(bool)
    kept = v[c]
    valid = _window_starts(np.cumsum(ends - starts), len(kept))
    # windows of a run of ones: its length - 3
    windows = np.maximum(ends - starts - (NGRAM - 1), 0)
    per_row = np.bincount(run_rows, weights=windows, minlength=rows).astype(np.int64)
    if len(kept) < NGRAM:
        return np.zeros(0, dtype=np.uint32), per_row
    return contiguous_keys(kept, valid), per_row


@dataclass(frozen=True)
class NgramStats:
    ngrams: np.ndarray  # counted 4-grams per row
    repeats: np.ndarray  # of which repeat an earlier 4-gram of the row
    fingerprints: np.ndarray  # uint64 per row: equal for equal counted token sequences


def ngram_stats(
    values: np.ndarray,
    offsets: np.ndarray,
    counted: np.ndarray | None = None,
    runs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> NgramStats:
    """4-gram statistics of each row of a flat id array (`offsets`: rows + 1, from 0).

    `counted` (bool per token, e.g. the loss mask) restricts the windows to tokens it marks;
    `runs` are its runs of ones as (starts, ends, row) when the caller has them already.
    """
    rows = len(offsets) - 1
    zeros = np.zeros(rows, dtype=np.int64)
    if len(values) < NGRAM:
        return NgramStats(zeros, zeros.copy(), np.zeros(rows, dtype=np.uint64))
    # int32 ids are reinterpreted, not copied.
    v = values.view(np.uint32) if values.dtype == np.int32 else values.astype(np.uint32)
    if counted is not None and runs is not None:
        mixed, per_row = _keys_of_runs(v, counted, runs, rows)
    else:
        mixed, per_row = _keys_of_rows(v, offsets, counted)
    # Fingerprint: the sum of the row's 4-gram hashes (64-bit, so sums do not wrap) and
    # their count: equal token sequences, equal fingerprints.
    fingerprints = per_row.astype(np.uint64) * FINGERPRINT_SEED
    has = per_row > 0
    starts = (np.cumsum(per_row) - per_row)[has]
    if len(mixed):
        fingerprints[has] += np.add.reduceat(mixed, starts, dtype=np.uint64)
    repeats = np.zeros(rows, dtype=np.int64)
    window_ends = np.cumsum(per_row)
    # One buffer for every block's keys, sorted in place (np.sort would copy each block).
    buffer = np.empty(min(len(mixed), SORT_BLOCK + int(per_row.max(initial=0))), np.uint32)
    first = 0
    while first < rows:
        # Whole rows, about SORT_BLOCK keys (and at most MAX_ROWS_PER_SORT rows) per sort.
        lo = int(window_ends[first] - per_row[first])
        last = int(np.searchsorted(window_ends, lo + SORT_BLOCK, side="right"))
        last = min(max(last, first + 1), first + MAX_ROWS_PER_SORT, rows)
        hi = int(window_ends[last - 1])
        if hi - lo >= 2:
            key = buffer[: hi - lo]
            np.bitwise_and(mixed[lo:hi], HASH_MASK, out=key)
            key |= np.repeat(np.arange(last - first, dtype=np.uint32), per_row[first:last])
            key.sort()
            same = key[1:] == key[:-1]
            repeats[first:last] = np.bincount(key[1:][same] & ROW_MASK, minlength=last - first)
        first = last
    return NgramStats(per_row.astype(np.int64), repeats, fingerprints)
