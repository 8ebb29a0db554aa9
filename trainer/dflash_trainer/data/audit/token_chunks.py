"""A batch's `loss_mask` and `input_ids` as aligned chunks, each flattened without a copy.

The tokens gate reads tables joined from HF's 1,000-row Arrow batches (`dataset.coalesce`).
Flattening such a column into one array copied every token (1.3 GB for the seed dataset) into
arrays of megabytes per table, which the allocator maps and unmaps (page faults). Kept as its
chunks, every pass over the tokens runs on ~1 MB that stays in the CPU cache, and only arrays of
one entry per row or per event are joined; the few ids read at given positions (think tags,
assistant headers) are gathered from the chunk that holds them (`take_ids`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from dflash_trainer.data.audit.lists import FlatList, flatten_list


@dataclass(frozen=True)
class TokenChunk:
    mask: FlatList
    ids: FlatList | None  # None: the batch has no `input_ids`
    first_value: int  # flat position of the chunk's first token in the batch
    first_row: int


@dataclass(frozen=True)
class TokenChunks:
    chunks: list[TokenChunk]
    offsets: np.ndarray  # rows + 1, from 0: the batch's rows in flat positions
    id_starts: np.ndarray  # first flat position of each chunk, then the batch's token count

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def size(self) -> int:
        return int(self.offsets[-1])

    @cached_property
    def _ids(self) -> list[np.ndarray]:
        return [c.ids.values for c in self.chunks if c.ids is not None]

    def take_ids(self, positions: np.ndarray) -> np.ndarray:
        """The ids at flat positions of the batch (each in [0, size)). Non-decreasing positions
        (one per row, in row order: what the gate reads) are cut into one slice per chunk;
        others are picked chunk by chunk."""
        parts = self._ids
        out: np.ndarray
        if len(parts) == 1:
            out = parts[0][positions]
            return out
        out = np.empty(len(positions), dtype=parts[0].dtype)
        if len(positions) < 2 or bool(np.all(positions[1:] >= positions[:-1])):
            bounds = np.searchsorted(positions, self.id_starts)
            for i, part in enumerate(parts):
                lo, hi = bounds[i], bounds[i + 1]
                out[lo:hi] = part[positions[lo:hi] - self.id_starts[i]]
            return out
        which = np.searchsorted(self.id_starts, positions, side="right") - 1
        for i, part in enumerate(parts):
            chosen = which == i
            out[chosen] = part[positions[chosen] - self.id_starts[i]]
        return out

    def take_row_ids(self, positions: np.ndarray) -> np.ndarray:
        """The ids at flat positions given per row (the last axis: one entry per row), each
        read in its row's chunk: a position outside that chunk reads the chunk's nearest id
        (0 in a chunk without ids). For positions that only matter inside their row (the
        edges of a span of the row): one slice of rows per chunk, no search."""
        parts = self._ids
        out: np.ndarray
        if len(parts) == 1 and len(parts[0]):
            out = np.take(parts[0], positions, mode="clip")
            return out
        out = np.zeros(positions.shape, dtype=np.int32)
        for chunk, part in zip(self.chunks, parts, strict=True):
            if len(part) == 0:
                continue
            rows = slice(chunk.first_row, chunk.first_row + chunk.mask.rows)
            out[..., rows] = np.take(part, positions[..., rows] - chunk.first_value, mode="clip")
        return out


def _arrays(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    if isinstance(column, pa.ChunkedArray):
        return [c for c in column.chunks if len(c)]
    return [column]


def token_chunks(
    mask_column: pa.Array | pa.ChunkedArray, ids_column: pa.Array | pa.ChunkedArray | None
) -> TokenChunks:
    """The two columns chunk by chunk (joined into one chunk where their chunks differ).

    ValueError where a row's ids and mask differ in length: every position of the one must be
    the same token of the other."""
    masks = _arrays(mask_column)
    ids = _arrays(ids_column) if ids_column is not None else [None] * len(masks)
    if len(ids) != len(masks) or any(
        i is not None and len(i) != len(m) for i, m in zip(ids, masks, strict=False)
    ):
        masks = [mask_column]
        ids = [ids_column]
    chunks: list[TokenChunk] = []
    row_starts = [np.zeros(1, dtype=np.int64)]
    first_value = first_row = 0
    for mask_part, ids_part in zip(masks, ids, strict=True):
        mask = flatten_list(mask_part, np.int8)
        flat_ids = flatten_list(ids_part, np.int32) if ids_part is not None else None
        if flat_ids is not None and not np.array_equal(flat_ids.offsets, mask.offsets):
            raise ValueError("input_ids and loss_mask must have the same length in every row")
        chunks.append(TokenChunk(mask, flat_ids, first_value, first_row))
        row_starts.append(mask.offsets[1:] + first_value)
        first_value += len(mask.values)
        first_row += mask.rows
    id_starts = np.array([c.first_value for c in chunks] + [first_value], dtype=np.int64)
    return TokenChunks(chunks, np.concatenate(row_starts), id_starts)
