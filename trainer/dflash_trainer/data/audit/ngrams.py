"""Per-row statistics of token-id spans, vectorised over a whole batch: the share of repeated
n-grams (repetition loops) and a hash of each span (exact duplicates).

A span is `[start, end)` in one flat id array (a row's completion, or its supervised tokens).
No per-row Python: every function is a few whole-array numpy passes plus one sort.
"""

from __future__ import annotations

import numpy as np

# Repetition is measured on 4-grams of token ids, as in "seq-rep-4" (Welleck et al. 2019,
# Neural Text Generation with Unlikelihood Training): human text repeats a few percent of its
# 4-grams, a generation stuck in a loop most of them.
NGRAM = 4
# n-gram keys: a polynomial in the ids with a random odd 64-bit multiplier (wrapping).
NGRAM_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
# The low bits of a sort key hold the row inside the batch, so equal keys are equal in-row
# n-grams; 48 bits of hash left make a false repeat among 4,096 n-grams ~3e-8 likely.
ROW_BITS = 16
MAX_ROWS_PER_SORT = 1 << ROW_BITS
HASH_MASK = np.uint64(~((1 << ROW_BITS) - 1) & 0xFFFFFFFFFFFFFFFF)
# Position weights of span hashes (random, fixed): hash = sum((id + 1) * weight[position]).
SPAN_WEIGHTS_SIZE = 1 << 16
_SPAN_WEIGHTS = np.random.default_rng(0x5EED).integers(
    0, np.iinfo(np.uint64).max, SPAN_WEIGHTS_SIZE, dtype=np.uint64, endpoint=True
) | np.uint64(1)


MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_2 = np.uint64(0x94D049BB133111EB)
SHIFT_30, SHIFT_27, SHIFT_31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix64(keys: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit reaches the high bits (the polynomial alone
    leaves the last id in the low bits, which the row bits then overwrite)."""
    z = (keys ^ (keys >> SHIFT_30)) * MIX_1
    z = (z ^ (z >> SHIFT_27)) * MIX_2
    mixed: np.ndarray = z ^ (z >> SHIFT_31)
    return mixed


def span_positions(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(flat positions covered by the spans, index of the span of each position)."""
    lengths = np.maximum(ends - starts, 0)
    total = int(lengths.sum())
    span = np.repeat(np.arange(len(starts), dtype=np.int64), lengths)
    first = np.cumsum(lengths) - lengths
    positions = starts[span] + (np.arange(total, dtype=np.int64) - first[span])
    return positions, span


def repeated_ngram_share(
    ids: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int = NGRAM
) -> tuple[np.ndarray, np.ndarray]:
    """(n-grams, repeated n-grams) per span: a repeat is an n-gram seen earlier in its span."""
    spans = len(starts)
    ngrams = np.maximum(ends - starts - (n - 1), 0)
    repeats = np.zeros(spans, dtype=np.int64)
    if spans == 0 or not ngrams.any():
        return ngrams, repeats
    values = ids.astype(np.uint64, copy=False)
    for first in range(0, spans, MAX_ROWS_PER_SORT):
        last = min(first + MAX_ROWS_PER_SORT, spans)
        s = starts[first:last]
        pos, span = span_positions(s, s + ngrams[first:last])
        key = values[pos]
        for k in range(1, n):
            key = key * NGRAM_MULTIPLIER + values[pos + k]
        key = np.sort((mix64(key) & HASH_MASK) | span.astype(np.uint64))
        same = np.flatnonzero(key[1:] == key[:-1]) + 1
        row_of_repeat = (key[same] & np.uint64(MAX_ROWS_PER_SORT - 1)).astype(np.int64)
        repeats[first:last] = np.bincount(row_of_repeat, minlength=last - first)
    return ngrams, repeats


def span_hashes(ids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each span's ids (position-weighted sum, plus the length)."""
    spans = len(starts)
    out = np.zeros(spans, dtype=np.uint64)
    if spans == 0:
        return out
    pos, span = span_positions(starts, ends)
    if len(pos) == 0:
        empty: np.ndarray = out + (ends - starts).astype(np.uint64)
        return empty
    offset_in_span = pos - starts[span]
    weights = _SPAN_WEIGHTS[offset_in_span % SPAN_WEIGHTS_SIZE]
    terms = (ids[pos].astype(np.uint64) + np.uint64(1)) * weights
    lengths = np.maximum(ends - starts, 0)
    nonempty = lengths > 0
    first = (np.cumsum(lengths) - lengths)[nonempty]
    out[nonempty] = np.add.reduceat(terms, first)
    hashed: np.ndarray = out + lengths.astype(np.uint64) * NGRAM_MULTIPLIER
    return hashed
