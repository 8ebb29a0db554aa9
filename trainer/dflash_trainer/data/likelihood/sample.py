"""Which rows get scored, and as which token ids: a fixed sample per source (the smallest sha256
of their ids, like the canary's), tokenized exactly as the tokenize stage would tokenize them
(the training template, the same ids and loss mask).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from dflash_trainer.data.likelihood.types import TokenizedRow

COMPLETION_COLUMNS = ["id", "source", "prompt", "response", "reasoning", "output_token_ids",
                      "finish_reason", "num_output_tokens"]  # fmt: skip
TOKENIZED_COLUMNS = ["id", "source", "input_ids", "loss_mask"]


def _rank(sample_id: str) -> bytes:
    return hashlib.sha256(sample_id.encode()).digest()


def select_rows(
    batches: Iterable[pa.RecordBatch | pa.Table], per_source: int
) -> list[dict[str, Any]]:
    """The `per_source` rows of each source with the smallest sha256 of their id, streamed
    (memory: `per_source` rows per source), in their order of appearance."""
    heaps: dict[str, list[tuple[bytes, int, dict[str, Any]]]] = {}
    # Only rows that enter a heap are copied out of their batch (no batch is kept alive).
    seen = 0
    for batch in batches:
        ids = batch.column("id").to_pylist() if "id" in batch.schema.names else None
        sources = batch.column("source").to_pylist() if "source" in batch.schema.names else None
        for j in range(batch.num_rows):
            seen += 1
            sample_id = str(ids[j]) if ids else f"row-{seen}"
            source = str(sources[j]) if sources else "(no source column)"
            heap = heaps.setdefault(source, [])
            key = bytes(255 - b for b in _rank(sample_id))  # a max-heap of the smallest hashes
            if len(heap) < per_source:
                heapq.heappush(heap, (key, seen, batch.slice(j, 1).to_pylist()[0]))
            elif key > heap[0][0]:
                heapq.heapreplace(heap, (key, seen, batch.slice(j, 1).to_pylist()[0]))
    chosen = sorted((item for heap in heaps.values() for item in heap), key=lambda t: t[1])
    return [row for _, _, row in chosen]


def tokenize_completions(
    rows: list[dict[str, Any]], row_tokenizer: Any
) -> tuple[list[TokenizedRow], int]:
    """Completion rows through the tokenize stage's own `RowTokenizer` (build it with
    `truncated_answers="keep"`: a cut answer is scored as the tokens the target generated).
    Returns the tokenized rows and how many could not be tokenized (template mismatches)."""
    table, counts = row_tokenizer.tokenize(rows)
    out = [
        TokenizedRow(str(i), str(s), ids, mask)
        for i, s, ids, mask in zip(
            table.column("id").to_pylist(),
            table.column("source").to_pylist(),
            table.column("input_ids").to_pylist(),
            table.column("loss_mask").to_pylist(),
            strict=True,
        )
    ]
    return out, counts.mismatched


def tokenized_rows(rows: list[dict[str, Any]]) -> list[TokenizedRow]:
    """Rows of the tokens gate (already tokenized)."""
    return [
        TokenizedRow(
            str(r.get("id")), str(r.get("source")), r["input_ids"] or [], r["loss_mask"] or []
        )
        for r in rows
    ]
