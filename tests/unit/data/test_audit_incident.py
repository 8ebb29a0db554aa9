"""The incident, reproduced: 87% stub answers in two of five sources fail both gates, by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dflash_trainer.data.audit.cli import main
from dflash_trainer.tiny.datasets import (
    IncidentShape,
    TokenLayout,
    build_incident_completions,
    build_incident_tokens,
)

BROKEN = {"openorca", "codealpaca"}
SAMPLES = 3000
LAYOUT = TokenLayout()


def write_tokens(folder: Path, stub_share: float) -> Path:
    folder.mkdir(parents=True)
    table = build_incident_tokens(
        SAMPLES, seed=1, shape=IncidentShape(stub_share=stub_share), layout=LAYOUT
    )
    pq.write_table(table, folder / "shard-00000.parquet")
    manifest = {
        "shards": [{"path": "shard-00000.parquet", "rows": SAMPLES}],
        "maxSeqLen": 4096,
        "tokenizer": {"thinkStartId": LAYOUT.think_start, "thinkEndId": LAYOUT.think_end},
    }
    (folder / "_SUCCESS.json").write_text(json.dumps(manifest))
    return folder


def write_completions(folder: Path, stub_share: float) -> Path:
    folder.mkdir(parents=True)
    table = build_incident_completions(SAMPLES, seed=2, shape=IncidentShape(stub_share=stub_share))
    pq.write_table(table, folder / "part-00000.parquet")
    return folder


def run_audit(
    data: Path, tmp_path: Path, *extra: str
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    out = tmp_path / "report"
    log = tmp_path / "termination-log"
    code = main([str(data), "--out", str(out), "--termination-log", str(log), *extra])
    assert len(log.read_bytes()) <= 4096
    return code, json.loads((out / "report.json").read_text()), json.loads(log.read_text())


def violations(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["check"]: v for v in report["violations"]}


def test_the_tokens_gate_fails_the_incident_naming_stubs_empty_thinking_mode_and_the_broken_sources(
    tmp_path: Path,
) -> None:
    code, report, summary = run_audit(write_tokens(tmp_path / "tokenized", 0.87), tmp_path)
    assert code == 3
    assert report["gate"] == "tokens" and report["verdict"] == "fail"
    found = violations(report)
    for check in ("stub_rate", "empty_thinking_rate", "loss_mask_mode_share"):
        assert check in found, sorted(found)
        assert set(found[check]["sources"]) == BROKEN
        for source in BROKEN:
            assert found[check]["perSource"][source] > 0.8
    assert report["overall"]["details"]["lossMaskMode"]["value"] == 6
    assert summary["verdict"] == "fail" and summary["stage"] == "audit" and not summary["ok"]
    assert "stub_rate" in summary["message"] and "openorca" in summary["message"]
    stub_examples = report["examples"]["stub_rate"]
    assert len(stub_examples) == 5
    assert {e["source"] for e in stub_examples} <= BROKEN
    assert all(e["lossMaskSum"] == 6 for e in stub_examples)
    out = tmp_path / "report"
    assert (out / "loss_mask_sum.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "FAIL" in (out / "report.md").read_text()


def test_the_completions_gate_fails_the_incident_naming_stubs_and_empty_thinking_in_the_broken_sources(
    tmp_path: Path,
) -> None:
    code, report, _ = run_audit(write_completions(tmp_path / "regen", 0.87), tmp_path)
    assert code == 3
    assert report["gate"] == "completions"
    found = violations(report)
    for check in ("stub_rate", "empty_thinking_rate", "top_response_share"):
        assert set(found[check]["sources"]) == BROKEN, check
    assert report["overall"]["details"]["topResponse"]["text"] == "OK."
    assert all(e["response"] == "OK." for e in report["examples"]["stub_rate"])


@pytest.mark.parametrize("gate", ["tokens", "completions"])
def test_a_healthy_dataset_passes_the_same_gate(gate: str, tmp_path: Path) -> None:
    writer = write_tokens if gate == "tokens" else write_completions
    code, report, summary = run_audit(writer(tmp_path / "data", 0.0), tmp_path)
    assert code == 0, report["violations"]
    assert report["verdict"] == "pass" and summary["ok"]
    assert report["examples"] == {}
    assert "empty_thinking_rate" in report["evaluatedChecks"]


def test_raised_thresholds_remove_exactly_those_checks_from_the_violations(tmp_path: Path) -> None:
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("audit:\n  maxStubRate: 0.9\n  maxEmptyThinkingRate: 0.9\n")
    code, report, _ = run_audit(
        write_tokens(tmp_path / "tokenized", 0.87), tmp_path, "--thresholds", str(thresholds)
    )
    assert code == 3
    assert report["thresholds"]["maxStubRate"] == 0.9
    assert set(violations(report)) == {
        "loss_mask_mode_share",
        "no_anchor_rate",
        "duplicate_completion_rate",
        "completion_tokens_p10",
        "completion_tokens_p50",
    }
