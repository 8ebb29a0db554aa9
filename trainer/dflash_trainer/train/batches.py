"""Training rows: read the tokenized shards (data contract section 4), split off held-out
samples, and hand each rank its rows of each global batch, resumably.

Rows stay in flat Arrow-style buffers (int32 tokens + int8 mask + offsets: 5 bytes per token).
Every epoch shuffles all rows with a generator seeded by (seed, epoch); global batch g of an
epoch is rows `perm[g*G : (g+1)*G]`, and rank r's micro-batch m is the slice
`[(m*W + r)*b : (m*W + r + 1)*b]` of it. The same global batch therefore trains whatever the
world size, and the position `(epoch, offset)` alone resumes the stream. Rows are padded to
the longest in a micro-batch, never packed together.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from dflash_trainer.storage import StorageError, arrow_filesystem, join_uri, read_json

MANIFEST = "_SUCCESS.json"
REQUIRED_COLUMNS = ("id", "input_ids", "loss_mask")
# Read when present: the likelihood monitor aggregates per source (data/likelihood).
SOURCE_COLUMN = "source"
NO_SOURCE = "(no source column)"
# Held-out membership hashes the sample id into this many buckets.
HOLDOUT_BUCKETS = 1_000_000


class DataError(ValueError):
    """Tokenized data that cannot be trained on; the message names the file and the problem."""


@dataclass(frozen=True)
class TokenRows:
    """Variable-length rows in flat buffers: row i is `tokens[offsets[i]:offsets[i+1]]`."""

    tokens: np.ndarray
    mask: np.ndarray
    offsets: np.ndarray
    ids: np.ndarray
    # Per row, an index into `source_names` (the training monitor's per-source figures).
    sources: np.ndarray | None = None
    source_names: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
        start = int(self.offsets[i])
        end = min(int(self.offsets[i + 1]), start + max_len)
        return self.tokens[start:end], self.mask[start:end]

    def select(self, keep: np.ndarray) -> TokenRows:
        """The rows where `keep` is true, re-packed."""
        lengths = np.diff(self.offsets)[keep]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        # Token j of the new buffer comes from old position `start_of_its_row + (j - new_start)`.
        shift = np.repeat(self.offsets[:-1][keep] - offsets[:-1], lengths)
        gather = np.arange(int(offsets[-1]), dtype=np.int64) + shift
        sources = None if self.sources is None else self.sources[keep]
        return TokenRows(
            self.tokens[gather], self.mask[gather], offsets, self.ids[keep], sources,
            self.source_names,
        )  # fmt: skip


def build_rows(input_ids: torch.Tensor, loss_mask: torch.Tensor, prefix: str) -> TokenRows:
    """Rows from equal-length tensors (self-distillation data); ids are `prefix-<i>`."""
    n, length = input_ids.shape
    return TokenRows(
        tokens=input_ids.reshape(-1).numpy().astype(np.int32),
        mask=loss_mask.reshape(-1).numpy().astype(np.int8),
        offsets=np.arange(0, (n + 1) * length, length, dtype=np.int64),
        ids=np.array([f"{prefix}-{i}" for i in range(n)], dtype=object),
        sources=np.zeros(n, dtype=np.int32),
        source_names=(prefix,),
    )


def _shard_paths(uri: str) -> list[str]:
    try:
        manifest = read_json(join_uri(uri, MANIFEST))
    except StorageError:
        raise DataError(
            f"data.tokenized_uri={uri}: no readable {MANIFEST}; the tokenize stage has not "
            "committed its output there"
        ) from None
    shards = manifest.get("shards") if isinstance(manifest, dict) else None
    if not shards:
        raise DataError(f"{join_uri(uri, MANIFEST)} lists no shards; expected shards: [{{path}}]")
    paths = []
    for shard in shards:
        rel = shard if isinstance(shard, str) else shard.get("path") or shard.get("file")
        if not rel:
            raise DataError(f"{join_uri(uri, MANIFEST)}: shard entry {shard!r} has no path")
        paths.append(join_uri(uri, rel.rsplit("/", 1)[-1] if rel.startswith("tokenized/") else rel))
    return paths


def read_tokenized(uri: str) -> TokenRows:
    """All rows of the shards listed in `<uri>/_SUCCESS.json`."""
    import pyarrow.parquet as pq

    tokens, masks, lengths, ids, sources = [], [], [], [], []
    for shard_uri in _shard_paths(uri):
        filesystem, path = arrow_filesystem(shard_uri)
        try:
            names = pq.read_schema(path, filesystem=filesystem).names
            wanted = [*REQUIRED_COLUMNS, *([SOURCE_COLUMN] if SOURCE_COLUMN in names else [])]
            table = pq.read_table(path, filesystem=filesystem, columns=wanted)
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"{shard_uri} cannot be read as tokenized Parquet: {exc}") from None
        if SOURCE_COLUMN in table.schema.names:
            sources.append(np.asarray(table.column(SOURCE_COLUMN).to_pylist(), dtype=object))
        else:
            sources.append(np.full(table.num_rows, NO_SOURCE, dtype=object))
        ids_col = table.column("id").to_numpy(zero_copy_only=False)
        ids_arr = table.column("input_ids").combine_chunks()
        mask_arr = table.column("loss_mask").combine_chunks()
        id_lengths = np.diff(ids_arr.offsets.to_numpy())
        if not np.array_equal(id_lengths, np.diff(mask_arr.offsets.to_numpy())):
            raise DataError(f"{shard_uri}: input_ids and loss_mask lengths differ in some rows")
        tokens.append(ids_arr.flatten().to_numpy().astype(np.int32, copy=False))
        masks.append(mask_arr.flatten().to_numpy().astype(np.int8, copy=False))
        lengths.append(id_lengths)
        ids.append(ids_col)
    all_lengths = np.concatenate(lengths)
    names, codes = np.unique(np.concatenate(sources).astype(str), return_inverse=True)
    return TokenRows(
        tokens=np.concatenate(tokens),
        mask=np.concatenate(masks),
        offsets=np.concatenate([[0], np.cumsum(all_lengths)]).astype(np.int64),
        ids=np.concatenate(ids).astype(object),
        sources=codes.astype(np.int32),
        source_names=tuple(str(n) for n in names),
    )


def is_holdout(sample_id: str, fraction: float) -> bool:
    """Held out for evaluation? A hash of the id, so training and evaluation agree."""
    digest = hashlib.sha256(sample_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % HOLDOUT_BUCKETS < fraction * HOLDOUT_BUCKETS


def split_holdout(rows: TokenRows, fraction: float) -> tuple[TokenRows, TokenRows]:
    """(training rows, held-out rows)."""
    if fraction <= 0:
        return rows, rows.select(np.zeros(len(rows), dtype=bool))
    held = np.array([is_holdout(str(i), fraction) for i in rows.ids], dtype=bool)
    return rows.select(~held), rows.select(held)


@dataclass
class DataCursor:
    """Where the stream is: `epoch` and `offset` (rows of that epoch already consumed)."""

    num_rows: int
    global_batch: int
    seed: int
    shuffle: bool = True
    epoch: int = 0
    offset: int = 0

    @property
    def steps_per_epoch(self) -> int:
        return self.num_rows // self.global_batch

    def permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_rows)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_rows)

    def next_global_batch(self) -> tuple[int, np.ndarray]:
        """(epoch, row indices of the next global batch); the last partial batch is dropped."""
        if self.offset + self.global_batch > self.num_rows:
            self.epoch, self.offset = self.epoch + 1, 0
        rows = self.permutation(self.epoch)[self.offset : self.offset + self.global_batch]
        self.offset += self.global_batch
        return self.epoch, rows

    def epoch_progress(self) -> float:
        """Epochs done, fractional (for progress reports)."""
        return self.epoch + self.offset / max(1, self.num_rows)

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    def restore(self, state: dict[str, int]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])


def rank_micro_batches(
    global_rows: np.ndarray, *, batch_size: int, world_size: int, rank: int, grad_accum: int
) -> list[np.ndarray]:
    """This rank's `grad_accum` micro-batches of one global batch."""
    out = []
    for micro in range(grad_accum):
        start = (micro * world_size + rank) * batch_size
        out.append(global_rows[start : start + batch_size])
    return out


def collate(
    rows: TokenRows, indices: np.ndarray, max_len: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `input_ids [b, S]`, `loss_mask [b, S]` (0 on padding) and `seq_lens [b]`."""
    pieces = [rows.row(int(i), max_len) for i in indices]
    width = max(len(t) for t, _ in pieces)
    input_ids = torch.zeros(len(pieces), width, dtype=torch.long)
    loss_mask = torch.zeros(len(pieces), width, dtype=torch.int8)
    for j, (tok, msk) in enumerate(pieces):
        input_ids[j, : len(tok)] = torch.from_numpy(tok.astype(np.int64))
        loss_mask[j, : len(msk)] = torch.from_numpy(msk)
    seq_lens = torch.tensor([len(t) for t, _ in pieces], dtype=torch.long)
    return input_ids.to(device), loss_mask.to(device), seq_lens.to(device)
