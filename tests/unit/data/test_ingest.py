"""Prompt ingestion: every source format, dedup, maxSamples, weight, turns, compressed streams."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.ingest import IngestStats, iter_prompts
from dflash_trainer.data.records import build_sample_id
from dflash_trainer.data.sources import SourceSpec, load_sources, parse_sources


def write_jsonl(path: Path, rows: list[Any]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def ingest(*specs: SourceSpec) -> tuple[list[Any], IngestStats]:
    stats = IngestStats()
    return list(iter_prompts(list(specs), stats)), stats


def spec(name: str, uri: str, fmt: str, **kw: Any) -> SourceSpec:
    return SourceSpec.model_validate({"name": name, "uri": uri, "format": fmt, **kw})


@pytest.mark.parametrize(
    ("fmt", "row", "expected"),
    [
        (
            "sharegpt",
            {
                "conversations": [
                    {"from": "human", "value": "Hi?"},
                    {"from": "gpt", "value": "Old."},
                ]
            },
            [{"role": "user", "content": "Hi?"}],
        ),
        (
            "openai-messages",
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi?"},
                ]
            },
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}],
        ),
        (
            "alpaca",
            {"instruction": "Sum these.", "input": "1 2", "output": "3"},
            [{"role": "user", "content": "Sum these.\n\n1 2"}],
        ),
        ("prompt-only", {"prompt": "Hi?"}, [{"role": "user", "content": "Hi?"}]),
    ],
)
def test_each_prompt_format_normalizes_to_messages_ending_with_the_first_user_turn(
    fmt: str, row: dict[str, Any], expected: list[dict[str, str]], tmp_path: Path
) -> None:
    records, stats = ingest(spec("src", write_jsonl(tmp_path / "a.jsonl", [row]), fmt))
    assert [r.messages for r in records] == [expected]
    assert records[0].id == build_sample_id("src", expected)
    assert stats.sources["src"].accepted == 1


def test_regenerated_rows_keep_their_answer_and_split_an_inline_think_block(tmp_path: Path) -> None:
    rows = [
        {"prompt": json.dumps([{"role": "user", "content": "Q1"}]), "response": "A1", "reasoning": "R1",
         "finish_reason": "length", "output_token_ids": [5, 6], "num_output_tokens": 2},
        {"messages": [{"role": "user", "content": "Q2"},
                      {"role": "assistant", "content": "<think>\nR2\n</think>\n\nA2"}]},
    ]  # fmt: skip
    records, _ = ingest(spec("done", write_jsonl(tmp_path / "r.jsonl", rows), "regenerated"))
    first, second = (r.completion for r in records)
    assert first is not None and second is not None
    assert (first.response, first.reasoning, first.finish_reason, first.output_token_ids) == (
        "A1",
        "R1",
        "length",
        [5, 6],
    )
    assert (second.response, second.reasoning) == ("A2", "R2")


def test_gzip_zstd_and_parquet_sources_stream_the_same_rows(tmp_path: Path) -> None:
    rows = [{"prompt": f"question {i}"} for i in range(50)]
    text = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(text))
    (tmp_path / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(text))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    for name in ("a.jsonl.gz", "b.jsonl.zst", "c.parquet"):
        records, _ = ingest(spec("s", str(tmp_path / name), "prompt-only"))
        assert [r.messages[0]["content"] for r in records] == [f"question {i}" for i in range(50)]


def test_a_folder_source_reads_every_data_file_in_name_order(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    write_jsonl(folder / "b.jsonl", [{"prompt": "second"}])
    write_jsonl(folder / "a.jsonl", [{"prompt": "first"}])
    (folder / "README.txt").write_text("not data")
    records, _ = ingest(spec("s", str(folder), "prompt-only"))
    assert [r.messages[0]["content"] for r in records] == ["first", "second"]


def test_duplicates_are_dropped_across_sources_and_counted(tmp_path: Path) -> None:
    a = write_jsonl(
        tmp_path / "a.jsonl", [{"prompt": "same"}, {"prompt": "same"}, {"prompt": "a-only"}]
    )
    b = write_jsonl(tmp_path / "b.jsonl", [{"prompt": "same"}, {"prompt": "b-only"}])
    records, stats = ingest(spec("a", a, "prompt-only"), spec("b", b, "prompt-only"))
    assert [(r.source, r.messages[0]["content"]) for r in records] == [
        ("a", "same"),
        ("a", "a-only"),
        ("b", "b-only"),
    ]
    assert (stats.sources["a"].duplicates, stats.sources["b"].duplicates) == (1, 1)


def test_max_samples_stops_reading_early_and_weight_repeats_or_subsamples_stably(
    tmp_path: Path,
) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"prompt": f"p{i}"} for i in range(400)])
    capped, stats = ingest(spec("s", path, "prompt-only", maxSamples=10))
    assert (
        len(capped) == 10
        and stats.sources["s"].rows == 10
        and stats.sources["s"].reached_max_samples
    )
    doubled, _ = ingest(spec("s", path, "prompt-only", weight=2.0))
    assert len(doubled) == 800 and len({r.id for r in doubled}) == 800
    half, _ = ingest(spec("s", path, "prompt-only", weight=0.5))
    again, _ = ingest(spec("s", path, "prompt-only", weight=0.5))
    assert 150 < len(half) < 250
    assert [r.id for r in half] == [r.id for r in again]


def test_turns_all_keeps_every_user_turn_and_drops_the_original_answers(tmp_path: Path) -> None:
    row = {"conversations": [{"from": "human", "value": "Q1"}, {"from": "gpt", "value": "A1"},
                             {"from": "human", "value": "Q2"}, {"from": "gpt", "value": "A2"}]}  # fmt: skip
    path = write_jsonl(tmp_path / "a.jsonl", [row])
    (record,), _ = ingest(spec("s", path, "sharegpt", turns="all"))
    assert record.all_turns
    assert [m["content"] for m in record.messages] == ["Q1", "Q2"]
    (first,), _ = ingest(spec("s", path, "sharegpt"))
    assert [m["content"] for m in first.messages] == ["Q1"] and not first.all_turns


def test_a_sources_file_with_an_unknown_format_names_the_field_and_the_accepted_values(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sources.yaml"
    path.write_text("- {name: a, uri: /x.jsonl, format: csv}\n")
    with pytest.raises(BadInputError) as err:
        load_sources(str(path))
    message = str(err.value)
    assert "sources[0].format" in message and "'csv'" in message and "sharegpt" in message
    assert "\n" not in message


def test_duplicate_source_names_are_refused() -> None:
    with pytest.raises(BadInputError, match="repeated: a"):
        parse_sources(
            [
                {"name": "a", "uri": "/x", "format": "alpaca"},
                {"name": "a", "uri": "/y", "format": "alpaca"},
            ],
            "sources.yaml",
        )
