"""The prompts gate: clean sources pass, prompts too long for the engine are caught per source."""

from __future__ import annotations

import json
from pathlib import Path

from dflash_trainer.data.audit.cli import main as audit_main
from dflash_trainer.tiny.build import build_tiny_target
from dflash_trainer.tiny.prompts import build_prompt_records


def write_sources(tmp_path: Path) -> Path:
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps(r) + "\n" for r in build_prompt_records(60)))
    long = tmp_path / "long.jsonl"
    text = "Explain every detail of binary search, step by step, with examples. " * 8
    long.write_text("".join(json.dumps({"prompt": f"{i}: {text}"}) + "\n" for i in range(60)))
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        f"sources:\n- {{name: short, uri: {short}, format: openai-messages}}\n"
        f"- {{name: long, uri: {long}, format: prompt-only}}\n"
    )
    return sources


def test_clean_sources_pass_and_the_report_goes_under_the_run_root(tmp_path: Path) -> None:
    sources = write_sources(tmp_path)
    run_root = tmp_path / "run"
    code = audit_main(
        [
            "--sources",
            str(sources),
            "--run-root",
            str(run_root),
            "--termination-log",
            str(tmp_path / "log"),
        ]
    )
    report = json.loads((run_root / "audit" / "prompts" / "report.json").read_text())
    assert code == 0, report["violations"]
    assert report["gate"] == "prompts" and report["sources"]["short"]["samples"] == 60
    assert "overlong_prompt_rate" in report["skippedChecks"]


def test_prompts_too_long_for_the_engine_fail_the_gate_in_their_source_only(tmp_path: Path) -> None:
    sources = write_sources(tmp_path)
    target = build_tiny_target(tmp_path / "tiny")
    out = tmp_path / "report"
    code = audit_main([
        str(sources), "--model", str(target.path), "--max-model-len", "160", "--max-new-tokens", "64",
        "--out", str(out), "--termination-log", str(tmp_path / "log"),
    ])  # fmt: skip
    report = json.loads((out / "report.json").read_text())
    assert code == 3
    (violation,) = report["violations"]
    assert violation["check"] == "overlong_prompt_rate" and violation["sources"] == ["long"]
    assert report["sources"]["short"]["metrics"]["overlong_prompt_rate"] == 0.0
