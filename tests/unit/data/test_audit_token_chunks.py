"""The tokens gate reads a batch chunk by chunk (zero-copy), local Arrow files from a memory map,
and counts 4-gram repeats in blocks of whole rows: none of it may change a feature. Checked
against the same rows in one chunk, against plain Python, and on files read back."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from dflash_trainer.data.audit import arrow_ipc
from dflash_trainer.data.audit.dataset import iter_batches
from dflash_trainer.data.audit.lists import FlatList, runs_of_ones
from dflash_trainer.data.audit.metrics_tokens import TokenAuditSettings, token_features
from dflash_trainer.data.audit.ngrams import FINGERPRINT_SEED, HASH_MASK, ngram_stats
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.audit.token_chunks import token_chunks
from dflash_trainer.data.audit.vocab import VocabInfo

IM_START, USER, ASSISTANT, NL, NN, THINK, END_THINK, EOT = 900, 901, 902, 5, 6, 903, 904, 905
VOCAB = VocabInfo(THINK, END_THINK, EOT, (NL, NN), (IM_START, ASSISTANT, NL), 1000)
SETTINGS = TokenAuditSettings(4, None, THINK, END_THINK, VOCAB)


def chat_rows(seed: int, rows: int) -> tuple[list[list[int]], list[list[int]]]:
    """Chat-shaped rows: prompts, think blocks with whitespace at their edges, loops, stubs,
    a supervised turn start now and then, empty rows."""
    rng = np.random.default_rng(seed)
    ids, masks = [], []
    for _ in range(rows):
        row: list[int] = []
        mask: list[int] = []
        for _ in range(int(rng.integers(0, 3))):
            prompt = [IM_START, USER, NL, *rng.integers(0, 50, int(rng.integers(0, 20))), EOT]
            header = [IM_START, ASSISTANT, NL]
            pattern = list(rng.integers(0, 50, int(rng.integers(1, 5))))
            reasoning = (pattern * 40)[: int(rng.integers(0, 60))] if rng.random() < 0.3 else []
            answer = [THINK, *[NL, NN][: int(rng.integers(0, 3))], *reasoning, NL, END_THINK]
            answer += [*rng.integers(0, 50, int(rng.integers(0, 30))), EOT]
            row += prompt + header + answer
            mask += [0] * (len(prompt) + len(header)) + [1] * len(answer)
        if mask and rng.random() < 0.1:
            mask[int(rng.integers(0, len(mask)))] ^= 1
        ids.append(row)
        masks.append(mask)
    return ids, masks


def table_of(ids: list[list[int]], masks: list[list[int]], cuts: list[int]) -> pa.Table:
    batch = pa.RecordBatch.from_pydict(
        {
            "source": [f"s{i % 3}" for i in range(len(ids))],
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "loss_mask": pa.array(masks, pa.list_(pa.int8())),
        }
    )
    bounds = [0, *cuts, len(ids)]
    return pa.Table.from_batches([batch.slice(a, b - a) for a, b in itertools.pairwise(bounds)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_features_of_a_table_in_chunks_equal_those_of_the_same_rows_in_one_chunk(seed: int) -> None:
    ids, masks = chat_rows(seed, 400)
    chunked = table_of(ids, masks, [37, 38, 200, 310])  # one chunk of a single row
    whole = chunked.combine_chunks()
    assert chunked.column("input_ids").num_chunks == 5 and whole.column("input_ids").num_chunks == 1
    thresholds = Thresholds()
    a = token_features(chunked, SETTINGS, thresholds)
    b = token_features(whole, SETTINGS, thresholds)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and np.array_equal(a[name], b[name]), name
    assert a["loop"].any() and a["mask_error"].any() and a["empty_thinking"].any()


def test_columns_chunked_differently_are_read_as_one_chunk() -> None:
    ids, masks = chat_rows(3, 50)
    table = table_of(ids, masks, [20])
    regrouped = pa.table(
        {
            "input_ids": table.column("input_ids").combine_chunks(),
            "loss_mask": table.column("loss_mask"),
        }
    )
    a = token_features(regrouped, SETTINGS, Thresholds())
    b = token_features(table, SETTINGS, Thresholds())
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_ids_and_mask_of_different_lengths_are_bad_input() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"input_ids": [[1, 2, 3], [4]], "loss_mask": [[0, 1], [1, 1]]},
        pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8()))]),
    )
    with pytest.raises(ValueError, match="same length"):
        token_features(batch, SETTINGS, Thresholds())


def test_ids_are_gathered_from_the_chunk_that_holds_them() -> None:
    ids, masks = chat_rows(4, 120)
    table = table_of(ids, masks, [10, 11, 70])
    chunks = token_chunks(table.column("loss_mask"), table.column("input_ids"))
    flat = np.array([t for row in ids for t in row], dtype=np.int32)
    rng = np.random.default_rng(0)
    for positions in (np.sort(rng.integers(0, len(flat), 500)), rng.integers(0, len(flat), 500)):
        assert np.array_equal(chunks.take_ids(positions), flat[positions])
    # Per row: each row's own positions read exactly; the others read their row's chunk.
    starts = chunks.offsets[:-1]
    inside = np.stack([starts, np.maximum(chunks.offsets[1:] - 1, starts)])
    has = chunks.lengths > 0
    got = chunks.take_row_ids(np.minimum(inside, len(flat) - 1))
    assert np.array_equal(got[:, has], flat[inside[:, has]])


def python_keys(piece: list[int]) -> list[int]:
    """The 4-gram keys of a piece, as ngrams.py computes them (uint32 arithmetic)."""
    m = 0x9E3779B1
    return [
        ((((a * m + b) * m * m) + c * m + d) * m) % (1 << 32)
        for a, b, c, d in zip(piece, piece[1:], piece[2:], piece[3:], strict=False)
    ]


def python_stats(pieces: list[list[int]]) -> tuple[int, int, int]:
    """(4-grams, repeats, fingerprint) of a row made of these pieces, in plain Python."""
    keys = [k for piece in pieces for k in python_keys(piece)]
    repeats = len(keys) - len({k & int(HASH_MASK) for k in keys})
    return len(keys), repeats, (len(keys) * int(FINGERPRINT_SEED) + sum(keys)) % (1 << 64)


@pytest.mark.parametrize("max_len", [6, 40])
def test_repeats_and_fingerprints_equal_plain_python_across_many_sort_blocks(max_len: int) -> None:
    """40,000 short rows: several sort blocks, and with rows of 0-5 tokens blocks that reach
    the most rows a sort holds (the rows' slots wrap)."""
    rng = np.random.default_rng(max_len)
    lengths = rng.integers(0, max_len, 40_000)
    flat = rng.integers(0, 4, int(lengths.sum())).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    rows = [flat[a:b].tolist() for a, b in itertools.pairwise(offsets)]
    counted = (rng.random(len(flat)) < 0.9).astype(np.int8)
    runs = runs_of_ones(FlatList(counted, offsets))
    pieces: list[list[list[int]]] = [[] for _ in rows]
    for a, b, row in zip(runs.starts, runs.ends, runs.rows, strict=True):
        pieces[int(row)].append(flat[a:b].tolist())
    for stats, expected in (
        (ngram_stats(flat, offsets), [python_stats([row]) for row in rows]),
        (
            ngram_stats(flat, offsets, counted, (runs.starts, runs.ends, runs.rows)),
            [python_stats(p) for p in pieces],
        ),
    ):
        got = [stats.ngrams.tolist(), stats.repeats.tolist(), stats.fingerprints.tolist()]
        assert list(zip(*got, strict=True)) == expected
        assert stats.repeats.sum() > 10


def write_ipc(path: Path, table: pa.Table, file_format: bool) -> None:
    with pa.OSFile(str(path), "wb") as sink:
        opener = pa.ipc.new_file if file_format else pa.ipc.new_stream
        with opener(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=100):
                writer.write_batch(batch)


@pytest.mark.parametrize("file_format", [False, True])
def test_mapped_arrow_files_read_back_every_batch_even_past_released_pages(
    file_format: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Release pages behind the reader after every few KB: batches still held read them back.
    monkeypatch.setattr(arrow_ipc, "KEEP_BEHIND", 0)
    monkeypatch.setattr(arrow_ipc, "RELEASE_STEP", 4096)
    ids, masks = chat_rows(5, 1000)
    table = table_of(ids, masks, [])
    path = tmp_path / "data-00000-of-00001.arrow"
    write_ipc(path, table, file_format)
    batches = list(iter_batches([str(path)], ["input_ids", "loss_mask", "absent"]))
    assert len(batches) == 10 and batches[0].schema.names == ["input_ids", "loss_mask"]
    assert pa.Table.from_batches(batches).equals(table.select(["input_ids", "loss_mask"]))


def test_a_file_that_cannot_be_mapped_is_read_through_a_file_handle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_mmap(*args: object, **kwargs: object) -> None:
        raise OSError("mmap not supported here")

    monkeypatch.setattr(arrow_ipc.mmap, "mmap", no_mmap)
    ids, masks = chat_rows(6, 300)
    table = table_of(ids, masks, [])
    path = tmp_path / "data.arrow"
    write_ipc(path, table, file_format=False)
    batches = list(iter_batches([str(path)], ["input_ids", "loss_mask"]))
    assert pa.Table.from_batches(batches).equals(table.select(["input_ids", "loss_mask"]))


def test_an_empty_arrow_file_is_bad_input_not_a_crash(tmp_path: Path) -> None:
    from dflash_trainer.data.errors import BadInputError

    path = tmp_path / "empty.arrow"
    path.write_bytes(b"")
    with pytest.raises(BadInputError):
        list(iter_batches([str(path)], ["input_ids"]))
