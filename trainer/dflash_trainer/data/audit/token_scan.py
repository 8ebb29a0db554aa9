"""Every pass of the tokens gate over the tokens themselves, chunk by chunk, joined per batch.

Per chunk (~1 MB of ids and mask, cache-resident): the loss mask's runs of ones, the positions
of a few control tokens (think end, turn start) and whether they are supervised, and the
supervised ids. Per batch: the 4-gram statistics of the supervised ids, cut by the mask's runs
(one call per table, not per chunk: ~0.5 ms of calls a chunk, measured). What comes out has one
entry per row, run or control token: the per-row features need no other pass over the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dflash_trainer.data.audit.lists import Runs, runs_of_ones
from dflash_trainer.data.audit.ngrams import NgramStats, piece_stats
from dflash_trainer.data.audit.token_chunks import TokenChunks

NEGATIVE_IDS = "input_ids must be token ids >= 0 (found a negative id)"


@dataclass(frozen=True)
class TokenScan:
    runs: Runs  # in the batch's flat positions and rows
    found: dict[int, np.ndarray]  # flat positions of each wanted token
    supervised: dict[int, np.ndarray]  # whether each of those positions is supervised
    ngrams: NgramStats | None  # per row; None without ids


def check_mask(chunks: TokenChunks) -> None:
    """ValueError unless every mask value is 0 or 1 (as uint8, -1 reads as 255: one pass)."""
    for chunk in chunks.chunks:
        values = chunk.mask.values
        if len(values) and int(values.view(np.uint8).max()) > 1:
            raise ValueError("loss_mask values must be 0 or 1")


def find_tokens(values: np.ndarray, wanted: list[int]) -> dict[int, np.ndarray]:
    """Positions of each wanted id, in one pass over the ids: control tokens (turn starts,
    think tags) sit above the text vocabulary in the tokenizers we target, so the candidates
    above the smallest wanted id are few, and each id is picked from those. Negative ids read
    as uint32 are above it too: they are found (ValueError) in the same pass."""
    if not wanted:
        if len(values) and int(values.min()) < 0:
            raise ValueError(NEGATIVE_IDS)
        return {}
    candidates = np.flatnonzero(values.view(np.uint32) >= min(wanted))
    found = values[candidates]
    if len(found) and int(found.min()) < 0:
        raise ValueError(NEGATIVE_IDS)
    return {token: candidates[found == token] for token in wanted}


def _joined(parts: list[np.ndarray], dtype: type[np.generic]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def scan_tokens(chunks: TokenChunks, wanted: list[int]) -> TokenScan:
    """The mask's runs everywhere; with ids, the wanted tokens and the 4-gram statistics."""
    starts, ends, run_rows, kept = [], [], [], []
    found: dict[int, list[np.ndarray]] = {t: [] for t in wanted}
    supervised: dict[int, list[np.ndarray]] = {t: [] for t in wanted}
    for chunk in chunks.chunks:
        runs = runs_of_ones(chunk.mask)
        starts.append(runs.starts + chunk.first_value)
        ends.append(runs.ends + chunk.first_value)
        run_rows.append(runs.rows + chunk.first_row)
        if chunk.ids is None:
            continue
        for token, at in find_tokens(chunk.ids.values, wanted).items():
            found[token].append(at + chunk.first_value)
            supervised[token].append(chunk.mask.values[at] == 1)
        kept.append(chunk.ids.values.view(np.uint32)[chunk.mask.values.view(bool)])
    joined = Runs(_joined(starts, np.int64), _joined(ends, np.int64), _joined(run_rows, np.int64))
    ngrams = None
    if kept:  # the supervised ids of the table, cut by the runs
        lengths = joined.ends - joined.starts
        ngrams = piece_stats(_joined(kept, np.uint32), lengths, joined.rows, chunks.rows)
    return TokenScan(
        joined,
        {t: _joined(p, np.int64) for t, p in found.items()},
        {t: _joined(p, np.bool_) for t, p in supervised.items()},
        ngrams,
    )
