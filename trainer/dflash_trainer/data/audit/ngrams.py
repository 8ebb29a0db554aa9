"""Per-row statistics of token 4-grams, vectorised over a whole batch: how many of a row's
4-grams repeat an earlier one of the same row (repetition loops), and a fingerprint of the row's
tokens (exact duplicates).

Only windows whose 4 tokens are all counted (supervised, for the tokens gate) and in one row
are used. The counted tokens are compressed once into "pieces" (runs of counted tokens, or whole
rows); then, block by block of whole rows (~64K windows, cache-resident), keys are computed from
shifted views (no gathers), summed into fingerprints and sorted as uint32 with the row in the
low bits. Nothing of the size of the batch is allocated past the compressed ids: every pass of
a block runs in the CPU cache, and no large temporary is mapped and unmapped per batch (page
faults were up to a quarter of the audit's time, measured).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dflash_trainer.data.audit.lists import FlatList, runs_of_ones

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
# Sort keys are uint32: the low 14 bits hold the row inside the block, 18 bits of hash are
# left. False repeats grow as n^2 / 2^19: ~0.8% of the 4-grams of a 4,096-token row, ~2% of a
# 10,000-token one: far under the loop threshold (half of them repeated).
ROW_BITS = 14
ROW_MASK = np.uint32((1 << ROW_BITS) - 1)
HASH_MASK = np.uint32(0xFFFFFFFF ^ ((1 << ROW_BITS) - 1))
# Windows that cross a piece's end take this sort key: row bits no real row of a block has
# (a block holds at most ROW_MASK rows), so their counts land in a bin that is dropped.
NOT_A_WINDOW = ROW_MASK
MAX_ROWS_PER_SORT = int(ROW_MASK)
FINGERPRINT_SEED = np.uint64(0x9E3779B97F4A7C15)
# Sorting many small blocks of whole rows beats one big sort (fewer levels, cache-resident);
# the keys of a block and their temporaries stay in the CPU cache too.
SORT_BLOCK = 1 << 16


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
    if len(values) < NGRAM:
        zeros = np.zeros(rows, dtype=np.int64)
        return NgramStats(zeros, zeros.copy(), np.zeros(rows, dtype=np.uint64))
    # int32 ids are reinterpreted, not copied.
    v = values.view(np.uint32) if values.dtype == np.int32 else values.astype(np.uint32)
    if counted is None:
        lengths = np.diff(offsets)
        whole = lengths > 0
        return piece_stats(v, lengths[whole], np.flatnonzero(whole), rows)
    c = counted.view(bool) if counted.dtype in (np.int8, np.uint8) else counted.astype(bool)
    if runs is None:
        found = runs_of_ones(FlatList(c.view(np.int8), offsets))
        runs = (found.starts, found.ends, found.rows)
    starts, ends, run_rows = runs
    # The counted tokens alone (the keys of a prompt are never computed: half the tokens of a
    # chat dataset); runs never cross a row, so the windows are the same as on whole rows.
    return piece_stats(v[c], ends - starts, run_rows, rows)


def piece_stats(
    ids: np.ndarray, lengths: np.ndarray, piece_rows: np.ndarray, rows: int
) -> NgramStats:
    """Statistics of `ids` (uint32) cut into non-empty pieces of `lengths` (in order, tiling
    `ids`), each belonging to a row of `piece_rows` (non-decreasing): a window is valid when its
    4 tokens lie in one piece. The tokens gate passes the supervised ids of a table and the
    loss mask's runs."""
    windows = np.maximum(lengths - (NGRAM - 1), 0)
    per_row = np.bincount(piece_rows, weights=windows, minlength=rows).astype(np.int64)
    row_sizes = np.bincount(piece_rows, weights=lengths, minlength=rows).astype(np.int64)
    row_ends = np.cumsum(row_sizes)
    # The last 3 positions of each piece start windows that leave it (clipped to the piece:
    # duplicates are harmless), in piece order, so each block's are a contiguous slice.
    piece_ends = np.cumsum(lengths)
    tails = np.maximum(piece_ends[:, None] - np.arange(1, NGRAM), (piece_ends - lengths)[:, None])
    fingerprints = per_row.astype(np.uint64) * FINGERPRINT_SEED
    repeats = np.zeros(rows, dtype=np.int64)
    n = len(ids)
    size = min(n, SORT_BLOCK + int(row_sizes.max(initial=0)))
    keys = np.empty(size, dtype=np.uint32)
    pairs = np.empty(size + 2, dtype=np.uint32)
    sort_keys = np.empty(size, dtype=np.uint32)
    first = 0
    while first < rows:
        # Whole rows, about SORT_BLOCK positions (and at most MAX_ROWS_PER_SORT rows) a block.
        lo = int(row_ends[first] - row_sizes[first])
        last = int(np.searchsorted(row_ends, lo + SORT_BLOCK, side="right"))
        last = min(max(last, first + 1), first + MAX_ROWS_PER_SORT, rows)
        hi = int(row_ends[last - 1])
        if hi > lo:
            block = keys[: hi - lo]
            _window_keys(ids, lo, hi, block, pairs)
            p0, p1 = np.searchsorted(piece_rows, (first, last))
            not_windows = tails[p0:p1].ravel() - lo
            block[not_windows] = 0
            sizes = row_sizes[first:last]
            _add_row_sums(fingerprints[first:last], block, sizes)
            _count_repeats(repeats[first:last], block, sizes, not_windows, sort_keys[: hi - lo])
        first = last
    return NgramStats(per_row, repeats, fingerprints)


def _window_keys(ids: np.ndarray, lo: int, hi: int, out: np.ndarray, pairs: np.ndarray) -> None:
    """Key of the 4 ids starting at each position of [lo, hi), into `out`; positions with no
    full window before the end of `ids` get 0. From shifted views: no gathers."""
    end = min(hi, len(ids) - (NGRAM - 1))
    count = end - lo
    if count > 0:
        # pair[i] = v[i] * M + v[i+1]; key[i] = (pair[i] * M^2 + pair[i+2]) * M
        pair = pairs[: count + 2]
        np.multiply(ids[lo : end + 2], MULTIPLIER, out=pair)
        pair += ids[lo + 1 : end + 3]
        keys = out[:count]
        np.multiply(pair[:-2], MULTIPLIER_2, out=keys)
        keys += pair[2:]
        keys *= MULTIPLIER
    out[max(count, 0) :] = 0


def _add_row_sums(fingerprints: np.ndarray, keys: np.ndarray, sizes: np.ndarray) -> None:
    """Fingerprint: the sum of the row's 4-gram keys (64-bit, so sums do not wrap) on top of
    the count already there: equal token sequences, equal fingerprints."""
    has = sizes > 0
    starts = (np.cumsum(sizes) - sizes)[has]
    fingerprints[has] += np.add.reduceat(keys, starts, dtype=np.uint64)


def _count_repeats(
    repeats: np.ndarray,
    keys: np.ndarray,
    sizes: np.ndarray,
    not_windows: np.ndarray,
    buffer: np.ndarray,
) -> None:
    """Per row, the windows whose hash equals an earlier one's of the row: one in-place sort of
    (hash, row) keys, equal neighbours counted per row."""
    rows = len(sizes)
    np.bitwise_and(keys, HASH_MASK, out=buffer)
    buffer |= np.repeat(np.arange(rows, dtype=np.uint32), sizes)
    buffer[not_windows] = NOT_A_WINDOW
    buffer.sort()
    same = buffer[1:] == buffer[:-1]
    repeats[:] = np.bincount(buffer[1:][same] & ROW_MASK, minlength=rows)[:rows]
