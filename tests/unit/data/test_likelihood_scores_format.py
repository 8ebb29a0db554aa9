"""Scores files carry their format: `gap` became a margin (issue 31), so a file written before
is refused with a message that says so, and the canary scores its rows again instead of
judging them with the wrong meaning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from dflash_trainer.data.likelihood.sampling import SamplingRule
from dflash_trainer.data.likelihood.scores import (
    FORMAT_KEY,
    META_KEY,
    SCORES_FORMAT,
    ScoresMeta,
    read_scores,
    write_scores,
)
from dflash_trainer.data.likelihood.types import RowScores


def one_row() -> RowScores:
    tokens = np.array([5, 6, 7], dtype=np.int32)
    floats = np.zeros(3, dtype=np.float32)
    return RowScores("r0", "s", np.array([1], dtype=np.int32), tokens, floats - 0.1,
                     np.zeros(3, dtype=np.int32), floats, floats, floats)  # fmt: skip


def test_scores_round_trip_with_their_format(tmp_path: Path) -> None:
    write_scores(str(tmp_path), [one_row()], ScoresMeta(SamplingRule(), "hf", "m", 64, {"k": 1}))
    table, meta = read_scores(str(tmp_path))
    assert table.num_rows == 1 and meta.extra == {"k": 1} and FORMAT_KEY not in meta.extra
    raw = json.loads(pq.read_schema(tmp_path / "scores.parquet").metadata[META_KEY])
    assert raw[FORMAT_KEY] == SCORES_FORMAT


def test_scores_written_before_the_margin_are_refused_naming_the_format(tmp_path: Path) -> None:
    write_scores(str(tmp_path), [one_row()], ScoresMeta(SamplingRule(), "hf", "m", 64))
    path = tmp_path / "scores.parquet"
    table = pq.read_table(path)
    old = json.loads(table.schema.metadata[META_KEY])
    del old[FORMAT_KEY]  # as the scorer wrote them before
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(old)}), path)
    with pytest.raises(
        ValueError, match=r"scores of format 1, written before `gap` became a margin"
    ):
        read_scores(str(tmp_path))
