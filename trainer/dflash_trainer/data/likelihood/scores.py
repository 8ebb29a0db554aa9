"""Scores: what a scorer measured on each row, per supervised token, in one Parquet file.

    <folder>/scores.parquet   one row per scored sample: id, source, the supervised token ids,
                              and per token its log-probability, rank, gap and the sampler's
                              mean and variance of NLL there (`likelihood.rule`)

Per-token numbers (not per-row verdicts) are kept so that a gate applies the row rule with
the thresholds of its own run: editing `spec.audit.likelihood` re-judges without re-scoring.
The file's metadata records the sampling rule, the scorer and the model it measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dflash_trainer.data.likelihood.sampling import SamplingRule
from dflash_trainer.data.likelihood.types import RowScores
from dflash_trainer.storage import StorageError, arrow_filesystem, join_uri, store_for

SCORES_FILE = "scores.parquet"
# Meta key: per source, the sampling rule its rows were scored under (null: unknown).
SOURCE_RULES_KEY = "sourceRules"
META_KEY = b"dflash.likelihood"
# The scores' layout. 2: `gap` is each token's margin (the largest engine tolerance under which
# it stays outside the support); before, it was a distance below the support's edge, which a
# gate of today would misread: such a file is refused (the canary scores again).
SCORES_FORMAT = 2
FORMAT_KEY = "scoresFormat"
SCORES_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("prompt_tail", pa.list_(pa.int32())),
        pa.field("token_ids", pa.list_(pa.int32())),
        pa.field("lp", pa.list_(pa.float32())),
        pa.field("rank", pa.list_(pa.int32())),
        pa.field("gap", pa.list_(pa.float32())),
        pa.field("mu", pa.list_(pa.float32())),
        pa.field("var", pa.list_(pa.float32())),
    ]
)


@dataclass
class ScoresMeta:
    rule: SamplingRule
    scorer: str
    model: str
    vocab_size: int
    extra: dict[str, Any] = field(default_factory=dict)

    def source_rule(self, source: str) -> SamplingRule | None:
        """The sampling `source`'s rows were judged against: its own declared sampling (the
        score stage), None when the source declared none (unknown), else the one rule."""
        rules = self.extra.get(SOURCE_RULES_KEY)
        if not isinstance(rules, dict) or source not in rules:
            return self.rule
        declared = rules[source]
        return SamplingRule.from_json(declared) if isinstance(declared, dict) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule.to_json(),
            "scorer": self.scorer,
            "model": self.model,
            "vocabSize": self.vocab_size,
            **self.extra,
            FORMAT_KEY: SCORES_FORMAT,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScoresMeta:
        known = ("rule", "scorer", "model", "vocabSize", FORMAT_KEY)
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(
            SamplingRule.from_json(data.get("rule") or {}),
            str(data.get("scorer", "?")),
            str(data.get("model", "?")),
            int(data.get("vocabSize", 0)),
            extra,
        )


def _list(values: list[np.ndarray], kind: pa.DataType) -> pa.ListArray:
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([len(v) for v in values], out=offsets[1:])
    flat = np.concatenate(values) if values else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, type=kind))


def build_scores_table(rows: list[RowScores], meta: ScoresMeta) -> pa.Table:
    table = pa.table(
        {
            "id": pa.array([r.id for r in rows], pa.string()),
            "source": pa.array([r.source for r in rows], pa.string()),
            "prompt_tail": _list([r.prompt_tail.astype(np.int32) for r in rows], pa.int32()),
            "token_ids": _list([r.token_ids.astype(np.int32) for r in rows], pa.int32()),
            "lp": _list([r.lp.astype(np.float32) for r in rows], pa.float32()),
            "rank": _list([r.rank.astype(np.int32) for r in rows], pa.int32()),
            "gap": _list([r.gap.astype(np.float32) for r in rows], pa.float32()),
            "mu": _list([r.mu.astype(np.float32) for r in rows], pa.float32()),
            "var": _list([r.var.astype(np.float32) for r in rows], pa.float32()),
        },
        schema=SCORES_SCHEMA,
    )
    return table.replace_schema_metadata({META_KEY: json.dumps(meta.to_json()).encode()})


def write_scores(folder: str, rows: list[RowScores], meta: ScoresMeta) -> str:
    """Write `<folder>/scores.parquet` in one piece; returns its URI."""
    uri = join_uri(folder, SCORES_FILE)
    sink = pa.BufferOutputStream()
    pq.write_table(build_scores_table(rows, meta), sink, compression="zstd")
    store_for(uri).write_bytes(uri, sink.getvalue().to_pybytes())
    return uri


def scores_uri(path: str) -> str:
    """The scores file of `path` (a folder or the file itself)."""
    return path if path.endswith(".parquet") else join_uri(path.rstrip("/"), SCORES_FILE)


def has_scores(path: str) -> bool:
    uri = scores_uri(path)
    try:
        return store_for(uri).exists(uri)
    except StorageError:
        return False


def read_scores(path: str) -> tuple[pa.Table, ScoresMeta]:
    """The scores table and its metadata; ValueError when it is not a scores file."""
    uri = scores_uri(path)
    filesystem, fpath = arrow_filesystem(uri)
    table = pq.read_table(filesystem.open_input_file(fpath))
    raw = (table.schema.metadata or {}).get(META_KEY)
    missing = [c for c in SCORES_SCHEMA.names if c not in table.schema.names]
    if raw is None or missing:
        raise ValueError(f"{uri} is not a likelihood scores file (missing {missing or 'metadata'})")
    meta = json.loads(raw)
    if meta.get(FORMAT_KEY) != SCORES_FORMAT:
        raise ValueError(
            f"{uri} has scores of format {meta.get(FORMAT_KEY, 1)}, written before `gap` became "
            f"a margin; this version reads format {SCORES_FORMAT}: score the rows again"
        )
    return table, ScoresMeta.from_json(meta)
