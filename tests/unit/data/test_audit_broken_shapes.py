"""The incident's cousins: one broken shape per new check, each caught in its own source, next to
a healthy source and the healthy trap (long reasoning, common short answer) of the same size,
which no check may flag. Both gates run through their real entry points on the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dflash_trainer.data.audit.cli import main as audit_main
from dflash_trainer.data.tokenize.cli import main as tokenize_main
from dflash_trainer.tiny.build import TinyTarget, build_tiny_target
from dflash_trainer.tiny.shapes import ShapeBuilder, build_table
from transformers import AutoTokenizer

ROWS = 200  # per source: well above minSourceSamples (50)
MAX_NEW_TOKENS = 1024
HEALTHY = ("healthy", "trap")
Rows = list[dict[str, Any]]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> TinyTarget:
    return build_tiny_target(Path(tmp_path_factory.mktemp("shapes")) / "tiny")


@pytest.fixture(scope="module")
def builder(target: TinyTarget) -> Callable[[int], ShapeBuilder]:
    tokenizer = AutoTokenizer.from_pretrained(target.path)

    def make(seed: int) -> ShapeBuilder:
        return ShapeBuilder(lambda text: tokenizer.encode(text, add_special_tokens=False), seed)

    return make


def write_regen(run_root: Path, rows: Rows) -> None:
    part = run_root / "regen" / "shard-00000" / "part-00000.parquet"
    part.parent.mkdir(parents=True)
    pq.write_table(build_table(rows), part)
    manifest = {"shard": 0, "shards": 1, "files": [{"path": "shard-00000/part-00000.parquet"}]}
    (run_root / "regen" / "shard-00000.commit.json").write_text(json.dumps(manifest))


def audit(run_root: Path, gate: str, *extra: str) -> tuple[int, dict[str, Any]]:
    log = run_root / f"{gate}.log"
    # These sources are synthetic text, not the tiny target's own answers: the shape checks are
    # judged on their own here (the likelihood check: tests/integration/data/test_likelihood_*).
    code = audit_main(["--run-root", str(run_root), "--gate", gate, "--termination-log", str(log),
                       "--no-plots", "--score-samples", "0", *extra])  # fmt: skip
    report = json.loads((run_root / "audit" / gate / "report.json").read_text())
    return code, report


def tokenize(run_root: Path, target: TinyTarget) -> dict[str, Any]:
    log = run_root / "tokenize.log"
    code = tokenize_main(["--run-root", str(run_root), "--model", str(target.path),
                          "--max-seq-len", "4096", "--termination-log", str(log)])  # fmt: skip
    summary: dict[str, Any] = json.loads(log.read_text())
    assert code == 0, summary
    return summary


def flagged(report: dict[str, Any]) -> dict[str, set[str]]:
    return {v["check"]: set(v["sources"]) for v in report["violations"]}


def assert_caught_only_in_broken(report: dict[str, Any], check: str) -> None:
    found = flagged(report)
    assert check in found, sorted(found)
    assert found[check] == {"broken"}, found[check]
    for name, sources in found.items():
        assert not sources & set(HEALTHY), f"{name} flagged a healthy source: {sources}"


def dataset(make: Callable[[int], ShapeBuilder], broken: Callable[[ShapeBuilder], Rows]) -> Rows:
    b = make(7)
    return [*b.healthy("healthy", ROWS), *b.trap("trap", ROWS), *broken(b)]


SHAPES: dict[str, tuple[Callable[[ShapeBuilder], Rows], str, str | None]] = {
    # shape: (broken source, completions check, tokens check)
    "generic short answers": (
        lambda b: b.generic_short("broken", ROWS),
        "completion_tokens_p50",
        "completion_tokens_p50",
    ),
    "near-empty thinking": (
        lambda b: b.near_empty_thinking("broken", ROWS),
        "near_empty_thinking_rate",
        "near_empty_thinking_rate",
    ),
    "silent truncation at the limit": (
        lambda b: b.silent_truncation("broken", ROWS, MAX_NEW_TOKENS, 0.3, "stop"),
        "silent_truncation_rate",
        None,
    ),
    "duplicated completions": (
        lambda b: b.duplicates("broken", ROWS, 0.3),
        "duplicate_completion_rate",
        "duplicate_completion_rate",
    ),
    "repetition loops ending in a stop token": (
        lambda b: b.loops("broken", ROWS, 0.3),
        "repetition_rate",
        "repetition_rate",
    ),
    "answers in another language": (
        lambda b: b.wrong_language("broken", ROWS, 0.3),
        "wrong_language_rate",
        None,
    ),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_broken_shape_is_caught_in_its_source_and_no_healthy_source_is_flagged(
    shape: str, builder: Callable[[int], ShapeBuilder], target: TinyTarget, tmp_path: Path
) -> None:
    broken, completions_check, tokens_check = SHAPES[shape]
    run_root = tmp_path / "run"
    write_regen(run_root, dataset(builder, broken))
    model = ["--model", str(target.path)]
    code, report = audit(run_root, "completions", *model, "--max-new-tokens", str(MAX_NEW_TOKENS))
    assert code == 3
    assert_caught_only_in_broken(report, completions_check)
    example = report["examples"][completions_check][0]
    assert example["source"] == "broken"
    if tokens_check is not None:
        tokenize(run_root, target)
        code, report = audit(run_root, "tokens", *model)
        assert code == 3
        assert_caught_only_in_broken(report, tokens_check)


def test_healthy_sources_and_the_trap_pass_both_gates(
    builder: Callable[[int], ShapeBuilder], target: TinyTarget, tmp_path: Path
) -> None:
    run_root = tmp_path / "run"
    b = builder(3)
    write_regen(run_root, [*b.healthy("healthy", ROWS), *b.trap("trap", ROWS)])
    model = ["--model", str(target.path)]
    code, report = audit(run_root, "completions", *model, "--max-new-tokens", str(MAX_NEW_TOKENS))
    assert code == 0, report["violations"]
    # The trap's answers are one of four short texts, yet every completion is distinct.
    trap = report["sources"]["trap"]
    assert trap["metrics"]["top_response_share"] < 0.05
    assert trap["details"]["duplicates"]["near"] == 0
    assert set(report["evaluatedChecks"]) >= {
        "near_empty_thinking_rate", "completion_tokens_p10", "thinking_tokens_p50",
        "duplicate_completion_rate", "repetition_rate", "silent_truncation_rate",
        "wrong_language_rate",
    }  # fmt: skip
    tokenize(run_root, target)
    code, report = audit(run_root, "tokens", *model)
    assert code == 0, report["violations"]
    assert "mask_error_rate" in report["evaluatedChecks"]


def test_imported_completions_without_finish_reason_cut_at_a_spike_are_probably_truncated(
    builder: Callable[[int], ShapeBuilder], target: TinyTarget, tmp_path: Path
) -> None:
    # No finish_reason and no known limit: the cut shows only as a spike at the top.
    b = builder(5)
    rows = [
        *b.silent_truncation("healthy", ROWS, MAX_NEW_TOKENS, 0.0, None),
        *b.trap("trap", ROWS),
        *b.silent_truncation("broken", ROWS, MAX_NEW_TOKENS, 0.3, None),
    ]
    run_root = tmp_path / "run"
    write_regen(run_root, rows)
    code, report = audit(run_root, "completions", "--model", str(target.path))
    assert code == 3
    assert_caught_only_in_broken(report, "silent_truncation_rate")
    cut = report["sources"]["broken"]["details"]["truncation"]
    assert cut["topSpikeLengths"] == [MAX_NEW_TOKENS]
    assert cut["probablyTruncated"] == cut["atTopSpike"] > 0.2 * ROWS
    assert report["sources"]["healthy"]["details"]["truncation"]["probablyTruncated"] == 0
    # Tokenization, told the limit, treats them as cut: dropped by default, counted per source.
    summary = tokenize_main(["--run-root", str(run_root), "--model", str(target.path),
                             "--max-new-tokens", str(MAX_NEW_TOKENS),
                             "--termination-log", str(tmp_path / "t.log")])  # fmt: skip
    assert summary == 0
    manifest = json.loads((run_root / "tokenized" / "_SUCCESS.json").read_text())
    per_source = manifest["truncatedAnswers"]["perSource"]
    assert per_source["broken"]["dropped"] == per_source["broken"]["probable"] == cut["atTopSpike"]
    assert "healthy" not in per_source


def test_a_violation_in_one_source_quotes_that_sources_value_not_the_overall_one(
    builder: Callable[[int], ShapeBuilder], target: TinyTarget, tmp_path: Path
) -> None:
    b = builder(11)
    rows = [*b.healthy("healthy", ROWS * 4), *b.loops("broken", ROWS, 0.3)]
    run_root = tmp_path / "run"
    write_regen(run_root, rows)
    code, _ = audit(run_root, "completions", "--model", str(target.path))
    summary = json.loads((run_root / "completions.log").read_text())
    (violation,) = [v for v in summary["violations"] if v["check"] == "repetition_rate"]
    assert violation["worstSource"] == "broken" and violation["worstValue"] > 0.2
    assert violation["value"] < 0.1  # overall: within the limit on its own
    assert f"repetition_rate {violation['worstValue']:.1%} in broken" in summary["message"]
    assert code == 3


@pytest.mark.parametrize("corruption", ["all ones", "prompt supervised"])
def test_a_loss_mask_that_supervises_the_prompt_fails_the_tokens_gate_in_its_source(
    corruption: str, builder: Callable[[int], ShapeBuilder], target: TinyTarget, tmp_path: Path
) -> None:
    b = builder(13)
    rows = [*b.healthy("healthy", ROWS), *b.trap("trap", ROWS), *b.healthy("broken", ROWS)]
    run_root = tmp_path / "run"
    write_regen(run_root, rows)
    tokenize(run_root, target)
    shard = run_root / "tokenized" / "shard-00000.parquet"
    table = pq.read_table(shard)
    masks = table.column("loss_mask").to_pylist()
    for i, source in enumerate(table.column("source").to_pylist()):
        if source != "broken":
            continue
        if corruption == "all ones":
            masks[i] = [1] * len(masks[i])
        else:  # supervision from the user's text on: the prompt is learned too
            masks[i] = [0] * 3 + [1] * (len(masks[i]) - 3)
    table = table.set_column(
        table.schema.get_field_index("loss_mask"), "loss_mask", pa.array(masks, pa.list_(pa.int8()))
    )
    pq.write_table(table, shard)
    code, report = audit(run_root, "tokens", "--model", str(target.path))
    assert code == 3
    found = flagged(report)
    assert found["mask_error_rate"] == {"broken"}
    assert report["sources"]["broken"]["metrics"]["mask_error_rate"] == 1.0
    assert report["sources"]["healthy"]["metrics"]["mask_error_rate"] == 0.0
    # Without the assistant header (no --model, a manifest without it), an all-ones mask is
    # still caught by its supervised first token.
    if corruption == "all ones":
        manifest_path = run_root / "tokenized" / "_SUCCESS.json"
        manifest = json.loads(manifest_path.read_text())
        manifest["tokenizer"]["assistantHeaderIds"] = []
        manifest_path.write_text(json.dumps(manifest))
        code, report = audit(run_root, "tokens")
        assert flagged(report)["mask_error_rate"] == {"broken"}


def test_stubs_repeated_at_one_length_are_stubs_not_silent_truncation(
    builder: Callable[[int], ShapeBuilder], target: TinyTarget, tmp_path: Path
) -> None:
    # The incident's shape, imported: the stub is the longest known length and its mode, but
    # the rows there are one text, not answers cut at a limit.
    b = builder(17)
    stubs = [b.row("broken", "", "OK.", finish=None) for _ in range(ROWS)]
    rows = [*b.healthy("healthy", ROWS), *b.trap("trap", ROWS), *stubs]
    run_root = tmp_path / "run"
    write_regen(run_root, rows)
    code, report = audit(run_root, "completions", "--model", str(target.path))
    found = flagged(report)
    assert code == 3 and found["stub_rate"] == {"broken"}
    assert "silent_truncation_rate" not in found
    assert report["sources"]["broken"]["details"]["truncation"]["topSpikeLengths"] == []
