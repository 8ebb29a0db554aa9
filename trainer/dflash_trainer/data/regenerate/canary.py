"""The canary: a fixed, small sample of every source, regenerated before the shards fan out so
that the completions gate can judge it first (a wrong template, thinking off by mistake or a
broken engine argument shows in minutes, not after the whole dataset).

    <run-root>/canary/regen/shard-00000/part-*.parquet     the canary's answers
    <run-root>/canary/regen/shard-00000.commit.json        committed like any shard

The sample is the `samples_per_source` records of each source with the smallest sha256 of
their id: the same on every pod and rerun, spread over the source like a random sample. The
full regeneration imports the committed canary rows of its shard instead of generating them
again (`load_canary_rows`), but only when they were generated with the same settings (model,
template, thinking, sampling, engine): the commit records a fingerprint of them. A canary whose
settings or sample changed (a retry after a fix) is discarded and generated afresh.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Iterable
from typing import Any

import pyarrow.parquet as pq

from dflash_trainer.data.records import PromptRecord
from dflash_trainer.data.regenerate.shard_store import ShardStore, base_id, shard_of
from dflash_trainer.storage import arrow_filesystem, join_uri

CANARY_FOLDER = "canary"


SETTINGS_KEY = "generationFingerprint"
SAMPLE_KEY = "sampleFingerprint"


def fingerprint(value: Any) -> str:
    """A short stable hash of JSON-able settings."""
    blob = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def is_current(store: ShardStore, settings: str, sample: str | None = None) -> bool:
    """Whether the committed canary was generated with these settings (and this sample)."""
    if not store.is_committed():
        return False
    commit = store.read_commit()
    if commit.get(SETTINGS_KEY) != settings:
        return False
    return sample is None or commit.get(SAMPLE_KEY) == sample


def discard(store: ShardStore) -> int:
    """Delete a stale canary (commit first, so that it never looks committed half-deleted)."""
    if store.is_committed():
        store.store.delete(store.commit_uri)
    return store.store.delete_prefix(store.part_prefix + "/")


def canary_root(run_root: str) -> str:
    return join_uri(run_root, CANARY_FOLDER)


def canary_store(run_root: str) -> ShardStore:
    """The canary's answers: one shard of one, under `<run-root>/canary/regen/`."""
    return ShardStore(canary_root(run_root), 0, 1)


def _rank(sample_id: str) -> bytes:
    return hashlib.sha256(sample_id.encode()).digest()


def select_canary(records: Iterable[PromptRecord], per_source: int) -> list[PromptRecord]:
    """The canary's records, streamed: the `per_source` smallest id hashes of each source."""
    heaps: dict[str, list[tuple[bytes, int, PromptRecord]]] = {}
    for n, record in enumerate(records):
        heap = heaps.setdefault(record.source, [])
        # A max-heap of the smallest hashes (negated by inverting the bytes).
        key = bytes(255 - b for b in _rank(record.id))
        item = (key, n, record)
        if len(heap) < per_source:
            heapq.heappush(heap, item)
        elif key > heap[0][0]:
            heapq.heapreplace(heap, item)
    chosen = [item for heap in heaps.values() for item in heap]
    return [record for _, _, record in sorted(chosen, key=lambda item: item[1])]


def load_canary_rows(
    run_root: str, shard: int, shards: int, settings: str
) -> dict[str, list[dict[str, Any]]]:
    """Committed canary rows of one shard of the full run, by sample id (every turn, in order);
    empty when there is no committed canary made with these generation settings."""
    store = canary_store(run_root)
    if not is_current(store, settings):
        return {}
    rows: dict[str, list[dict[str, Any]]] = {}
    for entry in store.read_commit().get("files", []):
        uri = join_uri(store.regen, entry["path"])
        filesystem, path = arrow_filesystem(uri)
        for row in pq.read_table(filesystem.open_input_file(path)).to_pylist():
            sample = base_id(row["id"])
            if shard_of(sample, shards) == shard:
                rows.setdefault(sample, []).append(row)
    for turns in rows.values():
        turns.sort(key=lambda r: int(r.get("turn") or 0))
    return rows
