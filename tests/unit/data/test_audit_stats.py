"""The confidence bound the gates judge rates with, and the figures docs/audit-gates.md quotes
(false alarms and power, exact binomial tails). The vectorised helpers agree with plain Python."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from dflash_trainer.data.audit.lists import FlatList, runs_of_ones
from dflash_trainer.data.audit.ngrams import ngram_stats
from dflash_trainer.data.audit.scripts import Script, script_counts, wrong_language
from dflash_trainer.data.audit.stats import (
    events_to_fail,
    false_alarm_rate,
    is_rate_above,
    wilson_lower,
    wilson_upper,
)
from dflash_trainer.data.audit.text_keys import near_keys, normalize_bytes, string_buffers
from dflash_trainer.data.audit.thresholds import Thresholds

DOC = Path(__file__).resolve().parents[3] / "docs" / "audit-gates.md"


def test_the_wilson_bounds_bracket_the_rate_and_tighten_with_samples() -> None:
    for events, samples in [(0, 10), (3, 10), (10, 10), (50, 1000), (999, 1000)]:
        rate = events / samples
        assert wilson_lower(events, samples) <= rate <= wilson_upper(events, samples)
    widths = [wilson_upper(n // 10, n) - wilson_lower(n // 10, n) for n in (20, 200, 2000)]
    assert widths == sorted(widths, reverse=True)
    assert wilson_lower(0, 0) == 0.0 and wilson_upper(0, 0) == 1.0


def test_a_rate_just_over_the_limit_on_few_samples_is_noise_and_a_gross_one_is_not() -> None:
    assert not is_rate_above(2, 20, 0.05)  # 10% on 20 samples: within noise of 5%
    assert is_rate_above(17, 20, 0.05)  # the incident's 87%, even on 20 samples
    assert is_rate_above(600, 10_000, 0.05)  # 6% on 10k samples: confidently above


@pytest.mark.parametrize("limit", [0.01, 0.05, 0.1])
def test_a_healthy_source_at_half_a_limit_almost_never_fails_from_the_default_source_size(
    limit: float,
) -> None:
    for samples in (Thresholds().min_source_samples, 256, 1000, 10_000):
        assert false_alarm_rate(samples, limit / 2, limit) < 0.005, samples
        assert false_alarm_rate(samples, limit, limit) < 0.025, samples


def doc_rows() -> dict[int, list[str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"^\| ([\d,]+)(?: \(the canary\))? \| (\d+) \(", line)
        if match:
            rows[int(match.group(1).replace(",", ""))] = [c.strip() for c in line.split("|")[1:-1]]
    return rows


def pct(value: float) -> str:
    return f"{value:.0%}" if value >= 0.995 or value >= 0.1 else f"{value:.2g}"


def test_the_false_alarm_and_power_table_in_the_docs_is_what_the_bound_gives() -> None:
    rows = doc_rows()
    assert sorted(rows) == [20, 50, 100, 256, 1000]
    for samples, cells in rows.items():
        fail_at = events_to_fail(samples, 0.05)
        assert cells[1].startswith(f"{fail_at} ("), (samples, cells[1])
        at_limit = false_alarm_rate(samples, 0.05, 0.05)
        assert cells[2] == f"{at_limit:.1%}", (samples, cells[2], at_limit)
        for column, factor in ((4, 2), (5, 3), (6, 10)):
            caught = false_alarm_rate(samples, 0.05 * factor, 0.05)
            shown = float(cells[column].rstrip("%")) / 100
            assert math.isclose(shown, caught, abs_tol=0.006), (samples, factor, cells[column])


def test_repeated_ngrams_match_a_plain_python_count() -> None:
    rng = np.random.default_rng(0)
    rows = [list(rng.integers(0, 6, n)) for n in (0, 3, 4, 30, 200)] + [[7, 8, 9, 10] * 25]
    rows += [list(rng.integers(0, 250_000, 3000))]
    flat = np.array([t for r in rows for t in r], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    stats = ngram_stats(flat, offsets)
    for i, row in enumerate(rows):
        grams = [tuple(row[k : k + 4]) for k in range(len(row) - 3)]
        assert stats.ngrams[i] == len(grams)
        # 18 hash bits: false repeats grow as n^2 / 2^19 (birthday bound), never a missed one.
        false = stats.repeats[i] - (len(grams) - len(set(grams)))
        assert 0 <= false <= 2 * len(grams) ** 2 / 2**19 + 1


def test_counted_windows_stay_inside_the_mask_and_fingerprints_match_equal_rows() -> None:
    rows = [[1, 2, 3, 4, 5, 6], [9, 1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7], [5, 5, 5, 5, 5]]
    masks = [[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 1]]
    flat = np.array([t for r in rows for t in r], dtype=np.int32)
    counted = np.array([m for r in masks for m in r], dtype=bool)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    stats = ngram_stats(flat, offsets, counted)
    assert stats.ngrams.tolist() == [3, 3, 3, 0]  # the gap in the last row leaves no window
    assert stats.fingerprints[0] == stats.fingerprints[1]  # same supervised tokens
    assert stats.fingerprints[0] != stats.fingerprints[2]


def test_windows_of_mask_runs_match_the_windows_of_the_whole_rows() -> None:
    """The gate passes the mask's runs: keys are then computed on the supervised tokens alone.
    Same windows, same repeats, same fingerprints as the row-by-row path, on masks with several
    runs per row, runs shorter than a window, empty rows and rows without supervision."""
    rng = np.random.default_rng(7)
    lengths = [0, 1, 3, 4, 5, 40, 300, 2000, *rng.integers(0, 600, 200)]
    flat = rng.integers(0, 12, int(sum(lengths))).astype(np.int32)  # small vocab: real repeats
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    counted = (rng.random(len(flat)) < 0.85).astype(np.int8)
    counted[offsets[5] : offsets[6]] = 0  # a row with no supervision
    runs = runs_of_ones(FlatList(counted, offsets))
    by_runs = ngram_stats(flat, offsets, counted, (runs.starts, runs.ends, runs.rows))
    by_rows = ngram_stats(flat, offsets, counted)
    assert by_runs.ngrams.sum() > 1000
    assert by_runs.ngrams.tolist() == by_rows.ngrams.tolist()
    assert by_runs.repeats.tolist() == by_rows.repeats.tolist()
    assert by_runs.fingerprints.tolist() == by_rows.fingerprints.tolist()


def test_near_duplicate_keys_fold_ascii_case_and_whitespace_like_python_would() -> None:
    texts = ["Hello  World", " hello world\n", "HELLO\tWORLD  ", "hello world!", "", "Ünï  Ça",
             "ünï ça", "a\x1f b"]  # fmt: skip
    data, offsets = normalize_bytes(*string_buffers(pa.array(texts)))
    ours = [bytes(data[offsets[i] : offsets[i + 1]]).decode() for i in range(len(texts))]

    ascii_space = " \t\n\x0b\x0c\r"

    def python(text: str) -> str:
        folded = "".join(c.lower() if c.isascii() else c for c in text)
        return " ".join(re.split(f"[{ascii_space}]+", folded.strip(ascii_space)))

    assert ours == [python(t) for t in texts]
    keys = near_keys(pa.array(texts))
    assert keys[0] == keys[1] == keys[2] and len(set(keys[3:7])) == 4


def test_scripts_are_counted_per_letter_and_wrong_language_needs_letters_on_both_sides() -> None:
    prompts = pa.array(["Explain binary search to me in detail please", "用Python写一个二分查找的函数并解释",
                        "Explain binary search to me in detail please", "What is six times seven?"])  # fmt: skip
    answers = pa.array(["二分查找每一步都把搜索范围缩小一半直到找到目标为止这是最基本的算法之一",
                        "这是代码：def search(a, x): 每次比较中间的元素然后缩小范围直到找到为止",
                        "Binary search halves the range at every step until it finds the value.",
                        "42"])  # fmt: skip
    prompt_counts, answer_counts = script_counts(prompts), script_counts(answers)
    assert prompt_counts[0, Script.LATIN] == sum(c.isalpha() for c in prompts[0].as_py())
    assert answer_counts[0, Script.HAN] == sum(
        1 for c in answers[0].as_py() if "\u4e00" <= c <= "\u9fff"
    )
    judged, wrong = wrong_language(prompt_counts, answer_counts)
    assert wrong.tolist() == [True, False, False, False]
    assert judged.tolist() == [True, True, True, False]  # "42" has no letters


def test_script_counts_agree_with_python_on_mixed_text() -> None:
    texts = ["Добрый день, мир", "γειά σου κόσμε", "مرحبا بالعالم", "こんにちは世界", "안녕하세요 세계",
             "emoji 🙂 and café", ""]  # fmt: skip
    counts = script_counts(pa.array(texts))
    for row, text in zip(counts, texts, strict=True):
        letters = Counter(ch for ch in text if ch.isalpha())
        assert row.sum() == sum(letters.values()), text


def test_a_chunked_list_column_flattens_like_its_combined_form() -> None:
    from dflash_trainer.data.audit.lists import flatten_list

    chunks = [pa.array([[1, 2], [], None]), pa.array([[3]]), pa.array([[4, 5, 6], [7]])]
    chunked = pa.chunked_array(chunks)
    ours, combined = (
        flatten_list(chunked, np.int32),
        flatten_list(chunked.combine_chunks(), np.int32),
    )
    assert ours.values.tolist() == combined.values.tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert ours.offsets.tolist() == combined.offsets.tolist() == [0, 2, 2, 2, 3, 6, 7]


def test_negative_token_ids_are_refused_with_a_message_not_a_traceback(tmp_path: Path) -> None:
    import json as _json

    import pyarrow.parquet as pq
    from dflash_trainer.data.audit.cli import main

    table = pa.table({"input_ids": pa.array([[1, 2, -1, 4]], pa.list_(pa.int32())),
                      "loss_mask": pa.array([[0, 1, 1, 1]], pa.list_(pa.int8()))})  # fmt: skip
    pq.write_table(table, tmp_path / "data.parquet")
    log = tmp_path / "log"
    code = main([str(tmp_path / "data.parquet"), "--out", str(tmp_path / "out"),
                 "--termination-log", str(log)])  # fmt: skip
    assert code == 2
    assert "input_ids must be token ids >= 0" in _json.loads(log.read_text())["message"]
