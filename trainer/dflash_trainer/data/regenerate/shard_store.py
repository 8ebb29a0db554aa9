"""One regeneration shard on S3 or disk: Parquet part files, what they already hold, and the
commit manifest written last (contract section 3).

    <run-root>/regen/shard-00042/part-00000.parquet ...
    <run-root>/regen/shard-00042.commit.json      the shard exists only once this exists

A part holds whole samples (every turn of each), in the order the runner finished them; the
sample ids in the written parts are what a resumed shard skips.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dflash_trainer.storage import (
    arrow_filesystem,
    join_uri,
    read_json,
    sha256_file,
    store_for,
    write_json,
)

COMPLETION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("prompt", pa.string()),
        pa.field("response", pa.string()),
        pa.field("reasoning", pa.string()),
        pa.field("output_token_ids", pa.list_(pa.int32())),
        pa.field("num_output_tokens", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("turn", pa.int16()),
    ]
)
TURN_SEPARATOR = ".t"
HASH_CHUNK = 4 * 1024 * 1024


def shard_of(sample_id: str, shards: int) -> int:
    """Stable shard of a sample: the same on every pod, run and Python version."""
    digest = hashlib.sha256(sample_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def base_id(row_id: str) -> str:
    """The sample id of a completion row (later turns are `<id>.t<turn>`)."""
    return row_id.split(TURN_SEPARATOR, 1)[0]


@dataclass(frozen=True)
class PartInfo:
    path: str  # relative to regen/
    sha256: str
    bytes: int
    rows: int
    output_tokens: int


class ShardStore:
    def __init__(self, run_root: str, shard: int, shards: int) -> None:
        self.regen = join_uri(run_root, "regen")
        self.shard = shard
        self.shards = shards
        self.name = f"shard-{shard:05d}"
        self.commit_uri = join_uri(self.regen, f"{self.name}.commit.json")
        self.part_prefix = join_uri(self.regen, self.name)
        self.store = store_for(run_root)

    def is_committed(self) -> bool:
        return self.store.exists(self.commit_uri)

    def read_commit(self) -> dict[str, Any]:
        data = read_json(self.commit_uri)
        return data if isinstance(data, dict) else {}

    def part_uris(self) -> list[str]:
        return sorted(
            o.uri for o in self.store.list(self.part_prefix + "/") if o.uri.endswith(".parquet")
        )

    def _columns(self, uri: str, columns: list[str]) -> pa.Table:
        filesystem, path = arrow_filesystem(uri)
        return pq.read_table(filesystem.open_input_file(path), columns=columns)

    def done_ids(self) -> set[str]:
        """Sample ids already in committed-to-storage parts: a resumed shard skips them."""
        done: set[str] = set()
        for uri in self.part_uris():
            ids = self._columns(uri, ["id"]).column("id").to_pylist()
            done.update(base_id(i) for i in ids)
        return done

    def write_part(self, table: pa.Table) -> PartInfo:
        """Write one part atomically (local temp file, then one upload)."""
        index = len(self.part_uris())
        name = f"part-{index:05d}.parquet"
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / name
            pq.write_table(table, local, compression="zstd")
            info = PartInfo(
                path=f"{self.name}/{name}",
                sha256=sha256_file(local),
                bytes=local.stat().st_size,
                rows=table.num_rows,
                output_tokens=int(pc.sum(table.column("num_output_tokens")).as_py() or 0),
            )
            self.store.upload_file(local, join_uri(self.part_prefix, name))
        return info

    def _describe(self, uri: str) -> PartInfo:
        digest = hashlib.sha256()
        size = 0
        with self.store.open_read(uri) as handle:
            for block in iter(lambda: handle.read(HASH_CHUNK), b""):
                digest.update(block)
                size += len(block)
        table = self._columns(uri, ["id", "num_output_tokens"])
        tokens = int(pc.sum(table.column("num_output_tokens")).as_py() or 0)
        rel = uri[len(self.regen) + 1 :]
        return PartInfo(rel, digest.hexdigest(), size, table.num_rows, tokens)

    def iter_ids(self) -> Iterator[str]:
        for uri in self.part_uris():
            yield from self._columns(uri, ["id"]).column("id").to_pylist()

    def commit(self, known: dict[str, PartInfo], extra: dict[str, Any]) -> dict[str, Any]:
        """Write the commit manifest over every part; refuses duplicate ids across parts."""
        seen: set[str] = set()
        duplicates = 0
        for row_id in self.iter_ids():
            duplicates += row_id in seen
            seen.add(row_id)
        if duplicates:
            raise RuntimeError(
                f"{self.part_prefix}: {duplicates} duplicate sample ids across parts "
                "(did two pods write this shard at once?); delete the shard's parts and rerun"
            )
        parts = []
        for uri in self.part_uris():
            rel = uri[len(self.regen) + 1 :]
            parts.append(known.get(rel) or self._describe(uri))
        manifest = {
            "shard": self.shard,
            "shards": self.shards,
            "samples": sum(p.rows for p in parts),
            "outputTokens": sum(p.output_tokens for p in parts),
            "files": [
                {"path": p.path, "sha256": p.sha256, "bytes": p.bytes, "rows": p.rows}
                for p in parts
            ],
            **extra,
        }
        write_json(self.commit_uri, manifest)
        return manifest
