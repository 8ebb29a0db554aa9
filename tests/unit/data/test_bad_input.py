"""Bad input is answered with counts, file:line examples and exit codes, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dflash_trainer.data.audit.cli import main as audit_main
from dflash_trainer.data.regenerate.cli import main as regenerate_main

GOOD = {"messages": [{"role": "user", "content": "Explain binary search."}]}
TEN_MB = 10 * 1024 * 1024


def good_line(i: int) -> bytes:
    return (
        json.dumps({"messages": [{"role": "user", "content": f"Question number {i}"}]}).encode()
        + b"\n"
    )


@pytest.fixture
def messy_file(tmp_path: Path) -> Path:
    lines = [good_line(i) for i in range(20)]
    lines.insert(3, b'{"messages": [{"role": "user", "content": "unterminated"}\n')  # line 4
    lines.insert(
        6, json.dumps({"messages": [{"role": "bot", "content": "hi"}]}).encode() + b"\n"
    )  # line 7
    lines.insert(
        9, json.dumps({"messages": [{"role": "user", "content": ["a", "b"]}]}).encode() + b"\n"
    )
    lines.insert(12, b'{"messages": [{"role": "user", "content": "caf\xe9"}]}\n')  # latin-1 byte
    lines.insert(15, b'{"prompt": "' + b"x" * TEN_MB + b'"}\n')  # one 10 MB line
    path = tmp_path / "messy.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def audit(tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "report"
    code = audit_main([*args, "--out", str(out), "--termination-log", str(tmp_path / "log")])
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, report


def test_every_kind_of_broken_line_is_counted_with_its_file_and_line(
    messy_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = audit(
        tmp_path, str(messy_file), "--gate", "prompts", "--format", "openai-messages"
    )
    assert code == 3
    details = report["sources"]["messy"]["details"]
    assert details["accepted"] == 20 and details["rows"] == 25
    assert details["issues"] == {
        "content_type": 1, "invalid_utf8": 1, "line_too_long": 1, "malformed_json": 1, "role": 1,
    }  # fmt: skip
    wheres = {e["kind"]: e["where"] for e in report["examples"]["malformed_rate"]}
    assert wheres["malformed_json"].startswith(f"{messy_file}:4: invalid JSON")
    assert wheres["content_type"].startswith(f"{messy_file}:10: content of message 0 is list")
    assert wheres["invalid_utf8"].startswith(f"{messy_file}:13: invalid UTF-8")
    assert wheres["line_too_long"].startswith(f"{messy_file}:16: line is 10.5 MB")
    roles = report["examples"]["role_error_rate"]
    assert roles[0]["where"].startswith(f"{messy_file}:7: message 0 has role 'bot'")
    found = {v["check"] for v in report["violations"]}
    assert {"malformed_rate", "role_error_rate"} <= found
    assert "Traceback" not in capsys.readouterr().err


def test_an_empty_file_fails_the_prompts_gate_and_is_bad_input_for_regeneration(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, report = audit(tmp_path, str(empty), "--gate", "prompts", "--format", "prompt-only")
    assert code == 3
    assert {v["check"] for v in report["violations"]} >= {"samples", "source_samples"}
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"- {{name: empty, uri: {empty}, format: prompt-only}}\n")
    log = tmp_path / "regen-log"
    code = regenerate_main(
        [
            "--run-root",
            str(tmp_path / "run"),
            "--sources",
            str(sources),
            "--termination-log",
            str(log),
        ]
    )
    assert code == 2
    summary = json.loads(log.read_text())
    assert (
        summary["ok"] is False
        and "source empty" in summary["message"]
        and "empty" in summary["message"]
    )


def test_a_source_with_only_broken_rows_stops_regeneration_with_examples(
    messy_file: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b'not json\n{"messages": 3}\n')
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"- {{name: broken, uri: {broken}, format: openai-messages}}\n")
    log = tmp_path / "log"
    code = regenerate_main(
        [
            "--run-root",
            str(tmp_path / "run"),
            "--sources",
            str(sources),
            "--termination-log",
            str(log),
        ]
    )
    assert code == 2
    message = json.loads(log.read_text())["message"]
    assert "2 rows, none usable" in message and f"{broken}:1: invalid JSON" in message


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--gate", "prompts", "--format", "csv"], "'csv'"),
        (["--gate", "tokens"], "does not exist"),
    ],
)
def test_unknown_formats_and_missing_files_exit_2_with_one_line(
    args: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nothing-here"
    code, _ = audit(
        tmp_path, str(missing / "x.jsonl") if "prompts" in args else str(missing), *args
    )
    assert code == 2
    summary = json.loads((tmp_path / "log").read_text())
    assert expected in summary["message"]
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_parquet_file_without_the_tokens_columns_names_what_it_has(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "wrong.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2]], "labels": [[1, 2]]}), path)
    code, _ = audit(tmp_path, str(path), "--gate", "tokens")
    assert code == 2
    message = json.loads((tmp_path / "log").read_text())["message"]
    assert "loss_mask" in message and "labels" in message
