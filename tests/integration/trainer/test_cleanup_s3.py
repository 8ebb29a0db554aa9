"""`python -m dflash_trainer.cleanup` against the real S3 server: what each cleanupPolicy
deletes and keeps, idempotence, progress lines, the stage result and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dflash_trainer.storage import join_uri, store_for

RUN_LAYOUT = {
    "regen/shard-00000/part-00000.parquet": b"p" * 300,
    "regen/shard-00000.commit.json": b"{}",
    "tokenized/shard-00000.parquet": b"t" * 200,
    "tokenized/_SUCCESS.json": b"{}",
    "audit/completions/report.json": b"{}",
    "audit/tokens/report.md": b"# report",
    "checkpoints/step-000001000/drafter.safetensors": b"w1",
    "checkpoints/step-000001000/COMMITTED.json": b"{}",
    "checkpoints/step-000002000/drafter.safetensors": b"w2",
    "checkpoints/step-000002000/COMMITTED.json": b"{}",
    "checkpoints/step-000003000/drafter.safetensors": b"partial",
    "final/config.json": b"{}",
    "final/model.safetensors": b"drafter",
    "final/README.md": b"# card",
    "eval/acceptance.json": b"{}",
}


def populate(root: str, layout: dict[str, bytes]) -> None:
    store = store_for(root)
    for key, data in layout.items():
        store.write_bytes(join_uri(root, key), data)


def keys(root: str) -> set[str]:
    return {o.uri.removeprefix(root + "/") for o in store_for(root).list(root + "/")}


def cleanup(*args: str, log: Path) -> tuple[int, str, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "dflash_trainer.cleanup", *args, "--termination-log", str(log)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    result = json.loads(log.read_text()) if log.exists() else {}
    return done.returncode, done.stderr, result


def test_delete_intermediate_keeps_the_drafter_reports_and_newest_checkpoint_and_is_idempotent(
    s3_prefix: str, tmp_path: Path
) -> None:
    root = f"{s3_prefix}/ns/run/uid"
    populate(root, RUN_LAYOUT)

    code, stderr, result = cleanup(
        "--run-root", root, "--policy", "DeleteIntermediate", log=tmp_path / "first.json"
    )

    assert code == 0, stderr
    assert keys(root) == {
        "audit/completions/report.json",
        "audit/tokens/report.md",
        "checkpoints/step-000002000/drafter.safetensors",
        "checkpoints/step-000002000/COMMITTED.json",
        "final/config.json",
        "final/model.safetensors",
        "final/README.md",
        "eval/acceptance.json",
    }
    assert result["stage"] == "cleanup" and result["ok"] is True
    assert result["policy"] == "DeleteIntermediate"
    assert result["deletedObjects"] == 7
    assert "checkpoints/step-000002000/" in result["kept"] and "final/" in result["kept"]
    assert f"deleted {join_uri(root, 'regen')}" in stderr  # one progress line per folder
    assert "cleanup 4/4" in stderr

    code, stderr, again = cleanup(
        "--run-root", root, "--policy", "DeleteIntermediate", log=tmp_path / "second.json"
    )

    assert code == 0, stderr
    assert again["ok"] is True and again["deletedObjects"] == 0
    assert again["message"].startswith("nothing to delete")
    assert len(keys(root)) == 8


def test_delete_removes_the_whole_run_root_and_nothing_beside_it(
    s3_prefix: str, tmp_path: Path
) -> None:
    root = f"{s3_prefix}/ns/run/uid"
    neighbour = f"{s3_prefix}/ns/run/uid-2"  # same key prefix without the '/'
    populate(root, RUN_LAYOUT)
    populate(neighbour, {"final/model.safetensors": b"other run"})

    code, stderr, result = cleanup("--run-root", root, "--policy", "Delete", log=tmp_path / "r")

    assert code == 0, stderr
    assert keys(root) == set()
    assert keys(neighbour) == {"final/model.safetensors"}
    assert result["ok"] is True and result["deletedObjects"] == len(RUN_LAYOUT)

    code, _stderr, again = cleanup("--run-root", root, log=tmp_path / "again")

    assert code == 0 and again["ok"] is True and again["deletedObjects"] == 0


def test_delete_intermediate_refuses_a_run_without_an_exported_drafter(
    s3_prefix: str, tmp_path: Path
) -> None:
    root = f"{s3_prefix}/ns/failed-run/uid"
    layout = {k: v for k, v in RUN_LAYOUT.items() if not k.startswith("final/")}
    populate(root, layout)

    code, _stderr, result = cleanup(
        "--run-root", root, "--policy", "DeleteIntermediate", log=tmp_path / "r"
    )

    assert code == 2
    assert result["ok"] is False and "final/model.safetensors does not exist" in result["message"]
    assert keys(root) == set(layout)


@pytest.mark.parametrize("bad_root", ["s3://{bucket}", "s3://{bucket}/", "pvc://claim/run"])
def test_a_bucket_root_or_an_unsupported_uri_is_refused_with_exit_code_2(
    s3_prefix: str, tmp_path: Path, bad_root: str
) -> None:
    bucket = s3_prefix.removeprefix("s3://").split("/", 1)[0]
    uri = bad_root.format(bucket=bucket)

    code, _stderr, result = cleanup("--run-root", uri, log=tmp_path / "r")

    assert code == 2
    assert result["ok"] is False and "--run-root" in result["message"]
