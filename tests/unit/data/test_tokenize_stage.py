"""Tokenization: truncation, re-tokenization drift, loud template mismatches, resumable shards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.tokenize.cli import main as tokenize_main
from dflash_trainer.data.tokenize.core import RowTokenizer, TokenizeSettings, cut_kind
from dflash_trainer.tiny.build import TinyTarget, build_tiny_target
from transformers import PreTrainedTokenizerFast

EOT = "<|im_end|>"


def row(
    i: int, response: str, reasoning: str | None = "Because.", ids: list[int] | None = None
) -> dict[str, Any]:
    return {
        "id": f"s{i}",
        "source": "src",
        "prompt": json.dumps([{"role": "user", "content": f"Question {i}?"}]),
        "response": response,
        "reasoning": reasoning,
        "output_token_ids": ids or [],
        "num_output_tokens": len(ids or []),
        "finish_reason": "stop",
        "turn": 0,
    }


def tokenizer_for(
    tok: PreTrainedTokenizerFast, max_len: int, thinking: bool = True
) -> RowTokenizer:
    return RowTokenizer(
        tok, ChatTemplate.from_tokenizer(tok), TokenizeSettings(max_len, EOT, thinking)
    )


def test_samples_longer_than_max_seq_len_are_cut_and_counted(
    qwen3_tokenizer: PreTrainedTokenizerFast,
) -> None:
    long_answer = "word " * 200
    table, counts = tokenizer_for(qwen3_tokenizer, 64).tokenize(
        [row(0, "Short."), row(1, long_answer)]
    )
    assert table.column("seq_len").to_pylist()[1] == 64
    assert table.column("truncated").to_pylist() == [False, True]
    assert counts.truncated == 1
    assert [len(x) for x in table.column("loss_mask").to_pylist()] == table.column(
        "seq_len"
    ).to_pylist()
    assert counts.tokens == sum(table.column("seq_len").to_pylist())


def test_drift_is_flagged_only_when_our_tokenizer_would_encode_the_engines_text_differently(
    qwen3_tokenizer: PreTrainedTokenizerFast,
) -> None:
    answer = "<think>\nBecause.\n</think>\n\nYes.<|im_end|>"
    same = qwen3_tokenizer(answer, add_special_tokens=False)["input_ids"]
    # The same text split into other tokens, as another tokenizer (revision) would produce.
    pieces = ["<think>", "\n", *"Because.", "\n", "</think>", "\n\n", "Yes.", "<|im_end|>"]
    other = [i for p in pieces for i in qwen3_tokenizer(p, add_special_tokens=False)["input_ids"]]
    assert qwen3_tokenizer.decode(other) == answer and other != same
    cut = same[:-1]  # stopped by max tokens: no end-of-turn from the engine
    rows = [
        row(0, "Yes.", ids=same),
        row(1, "Yes.", ids=other),
        row(2, "Yes.", ids=cut),
        row(3, "Yes."),
    ]
    table, counts = tokenizer_for(qwen3_tokenizer, 4096).tokenize(rows)
    assert table.column("retokenize_drift").to_pylist() == [False, True, False, None]
    assert (counts.drift_checked, counts.drift) == (3, 1)
    # Training uses the engine's ids as they are, drifted or not.
    ids = table.column("input_ids").to_pylist()
    mask = table.column("loss_mask").to_pylist()
    assert [t for t, m in zip(ids[1], mask[1], strict=True) if m] == other


def test_rows_the_template_cannot_mask_are_dropped_and_counted_with_an_example(
    qwen3_5_tokenizer: PreTrainedTokenizerFast,
) -> None:
    # A stray </think> in the answer: the template moves text into the think block.
    rows = [row(0, "Fine.", "Thought about it."), row(1, "Done.</think>Real.", None)]
    table, counts = tokenizer_for(qwen3_5_tokenizer, 4096).tokenize(rows)
    assert table.column("id").to_pylist() == ["s0"]
    assert counts.mismatches == {"dropped_answer": 1}
    assert counts.mismatch_examples[0].startswith("s1 (src): turn 1:")


@pytest.fixture(scope="module")
def tiny35(tmp_path_factory: pytest.TempPathFactory) -> TinyTarget:
    return build_tiny_target(Path(tmp_path_factory.mktemp("t35")) / "m", arch="qwen3_5")


def write_regen(run_root: Path, rows: list[dict[str, Any]]) -> None:
    part = run_root / "regen" / "shard-00000" / "part-00000.parquet"
    part.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), part)
    manifest = {"shard": 0, "shards": 1, "files": [{"path": "shard-00000/part-00000.parquet"}]}
    (run_root / "regen" / "shard-00000.commit.json").write_text(json.dumps(manifest))


def test_the_stage_exits_2_naming_the_rows_a_template_cannot_mask_unless_tolerated(
    tiny35: TinyTarget, tmp_path: Path
) -> None:
    run_root = tmp_path / "run"
    write_regen(
        run_root,
        [row(i, f"Answer {i}.", "Thought.") for i in range(9)]
        + [row(9, "Done.</think>Real.", None)],
    )
    log = tmp_path / "log"
    args = ["--run-root", str(run_root), "--model", str(tiny35.path), "--termination-log", str(log)]
    assert tokenize_main(args) == 2
    message = json.loads(log.read_text())["message"]
    assert "cannot mask 1 of 10 rows" in message and "s9 (src)" in message
    assert not (run_root / "tokenized" / "_SUCCESS.json").exists()
    assert tokenize_main([*args, "--max-template-mismatch-rate", "0.2"]) == 0
    summary = json.loads(log.read_text())
    assert summary["samples"] == 9 and summary["reusedShards"] == 1
    manifest = json.loads((run_root / "tokenized" / "_SUCCESS.json").read_text())
    assert manifest["templateMismatches"] == {"dropped_answer": 1}
    assert manifest["tokenizer"]["thinkEndId"] == tiny35.think_end_id


@pytest.mark.parametrize(
    ("finish", "count", "expected"),
    [("stop", 4096, None), ("length", 10, "reported"), ("repetition", 900, "reported"),
     (None, 4096, "probable"), (None, 4095, None)],
)  # fmt: skip
def test_answers_the_engine_cut_follow_the_truncation_policy_whatever_cut_them(
    finish: str | None, count: int, expected: str | None
) -> None:
    """vLLM's `repetition` (its loop detector stopped the answer) is a cut answer like
    `length`: no end of turn was generated, so it is dropped or kept unterminated."""
    row = {"finish_reason": finish, "num_output_tokens": count}
    assert cut_kind(row, max_new_tokens=4096) == expected
