"""Completions made elsewhere (`format: regenerated`) through the CLIs a user runs: imported
without a model, rows without finish_reason kept as unknown (never assumed finished), judged by
the completions gate, and dropped by tokenization when they reached the generation limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from dflash_trainer.data.audit.cli import main as audit_main
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.shard_store import ShardStore
from dflash_trainer.data.tokenize.cli import main as tokenize_main
from dflash_trainer.tiny.build import TinyTarget
from dflash_trainer.tiny.shapes import ShapeBuilder
from transformers import AutoTokenizer

ROWS = 120
LIMIT = 512


def exported(rows: list[dict[str, Any]], drop_finish: bool) -> str:
    """The JSONL an exporter writes: no id, no turn; maybe no finish_reason at all."""
    keep = ("prompt", "reasoning", "response", "output_token_ids", "num_output_tokens")
    out = []
    for row in rows:
        line = {k: row[k] for k in keep}
        if not drop_finish:
            line["finish_reason"] = row["finish_reason"]
        out.append(json.dumps(line))
    return "\n".join(out) + "\n"


def test_imported_rows_without_finish_reason_are_probably_truncated_at_the_limit(
    tiny_target: TinyTarget, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_target.path)
    b = ShapeBuilder(lambda text: tokenizer.encode(text, add_special_tokens=False), seed=3)
    healthy = b.silent_truncation("healthy", ROWS, LIMIT, 0.0, "stop")
    cut = b.silent_truncation("cut", ROWS, LIMIT, 0.4, "stop")
    (tmp_path / "healthy.jsonl").write_text(exported(healthy, drop_finish=False))
    (tmp_path / "cut.jsonl").write_text(exported(cut, drop_finish=True))
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"- {{name: healthy, uri: {tmp_path / 'healthy.jsonl'}, format: regenerated}}\n"
        f"- {{name: cut, uri: {tmp_path / 'cut.jsonl'}, format: regenerated}}\n"
    )
    run_root = tmp_path / "run"
    log = tmp_path / "regen.log"
    code = regenerate_main(["--run-root", str(run_root), "--sources", str(sources),
                            "--termination-log", str(log)])  # fmt: skip
    assert code == 0, log.read_text()
    rows = {r["id"]: r for u in ShardStore(str(run_root), 0, 1).part_uris()
            for r in pq.read_table(u).to_pylist()}  # fmt: skip
    finish = {r["source"]: set() for r in rows.values()}
    for r in rows.values():
        finish[r["source"]].add(r["finish_reason"])
    assert finish == {"healthy": {"stop"}, "cut": {None}}

    # Synthetic text, not the tiny target's answers: the shape checks alone (--score-samples 0).
    code = audit_main(["--run-root", str(run_root), "--gate", "completions", "--model",
                       str(tiny_target.path), "--max-new-tokens", str(LIMIT), "--no-plots",
                       "--score-samples", "0",
                       "--termination-log", str(tmp_path / "audit.log")])  # fmt: skip
    report = json.loads((run_root / "audit" / "completions" / "report.json").read_text())
    assert code == 3
    (violation,) = [v for v in report["violations"] if v["check"] == "silent_truncation_rate"]
    assert violation["sources"] == ["cut"]
    truncation = report["sources"]["cut"]["details"]["truncation"]
    assert truncation["probablyTruncated"] == truncation["atLimit"] > 0.25 * ROWS

    code = tokenize_main(["--run-root", str(run_root), "--model", str(tiny_target.path),
                          "--max-new-tokens", str(LIMIT), "--max-seq-len", "4096",
                          "--termination-log", str(tmp_path / "tok.log")])  # fmt: skip
    assert code == 0, (tmp_path / "tok.log").read_text()
    manifest = json.loads((run_root / "tokenized" / "_SUCCESS.json").read_text())
    per_source = manifest["truncatedAnswers"]["perSource"]
    assert per_source["cut"]["dropped"] == per_source["cut"]["probable"] == truncation["atLimit"]
    assert manifest["samples"] == 2 * ROWS - truncation["atLimit"]
    # Every kept row ends its answer with the end of turn the engine wrote: none was appended.
    table = pq.read_table(run_root / "tokenized" / "shard-00000.parquet")
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert all(ids[-1] == eot for ids in table.column("input_ids").to_pylist())
