"""`kubectl dflash audit`: violated checks, the report's location and exit code 3 for a failed
gate; with S3 credentials in the environment, the Markdown report is downloaded from the real
S3 server and shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPORT = "# Completions gate: FAILED\n\n| check | value | threshold |\n|---|---|---|\n| maxStubRate | 0.871 | 0.05 |\n"
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
)


@pytest.fixture
def no_s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_failed_gate_lists_its_violated_checks_and_report_and_exits_3(
    plugin: Any, no_s3_credentials: None
) -> None:
    plugin.create_run("stub-answers", "audit-failed")

    result = plugin.run("audit", "stub-answers")

    report = (
        f"s3://ml-artifacts/dflash/{plugin.namespace}/stub-answers/5c1f/audit/completions/report.md"
    )
    assert result.code == 3
    assert result.out.startswith("completions gate: FAILED (generation 1, attempt 1, ")
    assert (
        "- maxStubRate  0.871 > 0.05  stub responses 87.1% > 5%  [sources: nemotron-chat, codealpaca]"
        in result.out
    )
    assert "- maxEmptyThinkingRate  0.869 > 0.1" in result.out
    assert f"report: {report}" in result.out
    assert (
        f"kubectl dflash approve stub-answers -n {plugin.namespace} --gate completions"
        in result.out
    )
    assert f"To download and open {report}, put S3 credentials in the environment" in result.err


def test_gates_that_passed_exit_0_and_a_gate_that_has_not_run_says_so(
    plugin: Any, no_s3_credentials: None
) -> None:
    plugin.create_run("mid-training", "training")

    passed = plugin.run("audit", "mid-training")
    not_run = plugin.run("audit", "mid-training", "--gate", "prompts")

    assert passed.code == 0
    assert "completions gate: PASSED" in passed.out and "tokens gate: PASSED" in passed.out
    assert not_run.code == 0
    assert not_run.out == "prompts gate: not run yet\n"


def test_audit_as_json_carries_the_verdict_violations_and_report_uri(
    plugin: Any, no_s3_credentials: None
) -> None:
    plugin.create_run("stub-answers", "audit-failed")

    result = plugin.run("audit", "stub-answers", "--gate", "completions", "-o", "json")

    (gate,) = json.loads(result.out)["gates"]
    assert result.code == 3
    assert gate["gate"] == "completions" and gate["verdict"] == "fail"
    assert [v["check"] for v in gate["violations"]] == ["maxStubRate", "maxEmptyThinkingRate"]
    assert gate["reportUri"].endswith("/audit/completions/report.md")


def test_with_s3_credentials_the_markdown_report_is_downloaded_and_shown(
    plugin: Any, s3: Any, s3_prefix: str, tmp_path: Path
) -> None:
    bucket, _, prefix = s3_prefix.removeprefix("s3://").partition("/")
    s3.client().put_object(
        Bucket=bucket, Key=f"{prefix}/audit/completions/report.md", Body=REPORT.encode()
    )
    plugin.create_run("stub-answers", "audit-failed", root=s3_prefix)

    result = plugin.run("audit", "stub-answers", "--download-dir", str(tmp_path))

    downloaded = tmp_path / "report.md"
    assert result.code == 3, result.err
    assert downloaded.read_text() == REPORT
    assert f"report downloaded to {downloaded}" in result.out
    assert REPORT in result.out


def test_a_report_missing_from_s3_is_a_clear_error(
    plugin: Any, s3: Any, s3_prefix: str, tmp_path: Path
) -> None:
    plugin.create_run("stub-answers", "audit-failed", root=s3_prefix)

    result = plugin.run("audit", "stub-answers", "--download-dir", str(tmp_path))

    assert result.code == 1
    assert (
        f"error: could not download {s3_prefix}/audit/completions/report.md at {s3.endpoint_url}"
        in result.err
    )
