"""Regenerate -> tokenize -> audit through a real S3 server with the transformers engine on a tiny
target: shard commits, a kill mid-shard and resume without duplicates, reruns that do nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dflash_trainer.data.audit.cli import main as audit_main
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.shard_store import ShardStore, shard_of
from dflash_trainer.data.tokenize.cli import main as tokenize_main
from dflash_trainer.storage import arrow_filesystem, read_json, sha256_bytes, store_for
from dflash_trainer.tiny.build import TinyTarget
from dflash_trainer.tiny.prompts import build_prompt_records

PROMPTS = 24
KILL_TIMEOUT_SECONDS = 240


def upload_prompts(s3_prefix: str, tmp_path: Path, count: int = PROMPTS) -> Path:
    """Prompts live in S3 (read as a stream); sources.yaml is a local file, as in a pod."""
    data = "".join(json.dumps(r) + "\n" for r in build_prompt_records(count, seed=5)).encode()
    uri = f"{s3_prefix}/data/prompts.jsonl"
    store_for(uri).write_bytes(uri, data)
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"- name: tiny\n  uri: {uri}\n  format: openai-messages\n")
    return sources


def regen_args(
    run_root: str, sources: Path, target: TinyTarget, shard: int, log: Path, part_rows: int
) -> list[str]:
    return [
        "--run-root", run_root, "--sources", str(sources), "--model", str(target.path),
        "--engine", "transformers", "--shards", "2", "--shard", str(shard), "--max-tokens", "8",
        "--part-rows", str(part_rows), "--batch-size", "4", "--threads", "1",
        "--progress-seconds", "0", "--termination-log", str(log),
    ]  # fmt: skip


def read_ids(uri: str) -> list[str]:
    filesystem, path = arrow_filesystem(uri)
    table = pq.read_table(filesystem.open_input_file(path), columns=["id"])
    return [str(i) for i in table.column("id").to_pylist()]


def shard_ids(store: ShardStore) -> list[str]:
    return [i for uri in store.part_uris() for i in read_ids(uri)]


def test_a_shard_regenerates_through_s3_commits_and_a_rerun_is_a_no_op(
    s3_prefix: str, tiny_target: TinyTarget, tmp_path: Path
) -> None:
    sources = upload_prompts(s3_prefix, tmp_path)
    run_root = f"{s3_prefix}/run"
    log = tmp_path / "log"
    assert regenerate_main(regen_args(run_root, sources, tiny_target, 0, log, 5)) == 0
    summary = json.loads(log.read_text())
    store = ShardStore(run_root, 0, 2)
    manifest = read_json(store.commit_uri)
    ids = shard_ids(store)
    assert summary["ok"] and not summary["skipped"] and summary["commitUri"] == store.commit_uri
    assert manifest["samples"] == summary["samples"] == len(ids) == len(set(ids)) > 0
    assert all(shard_of(i, 2) == 0 for i in ids)
    for entry in manifest["files"]:
        uri = f"{run_root}/regen/{entry['path']}"
        assert sha256_bytes(store_for(uri).read_bytes(uri)) == entry["sha256"]
    parts_before = store.part_uris()
    assert regenerate_main(regen_args(run_root, sources, tiny_target, 0, log, 5)) == 0
    again = json.loads(log.read_text())
    assert again["skipped"] is True and again["samples"] == manifest["samples"]
    assert store.part_uris() == parts_before


def test_a_shard_killed_mid_way_resumes_without_redoing_or_duplicating_samples(
    s3_prefix: str, tiny_target: TinyTarget, tmp_path: Path
) -> None:
    sources = upload_prompts(s3_prefix, tmp_path)
    run_root = f"{s3_prefix}/run"
    store = ShardStore(run_root, 1, 2)
    cmd = [sys.executable, "-m", "dflash_trainer.data.regenerate",
           *regen_args(run_root, sources, tiny_target, 1, tmp_path / "killed-log", 2)]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + KILL_TIMEOUT_SECONDS
    try:
        while not store.part_uris() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert store.part_uris(), "the stage wrote no part before the deadline"
    assert not store.is_committed(), "the stage finished before it could be killed"
    done_before = shard_ids(store)
    shas_before = {u: sha256_bytes(store_for(u).read_bytes(u)) for u in store.part_uris()}
    log = tmp_path / "log"
    assert regenerate_main(regen_args(run_root, sources, tiny_target, 1, log, 2)) == 0
    summary = json.loads(log.read_text())
    ids = shard_ids(store)
    assert summary["resumedFrom"] == len(done_before) > 0
    assert len(ids) == len(set(ids)) == summary["samples"]
    assert set(done_before) < set(ids)
    for uri, sha in shas_before.items():
        assert sha256_bytes(store_for(uri).read_bytes(uri)) == sha, (
            "finished parts are never rewritten"
        )


def run_json(main: Any, args: list[str], log: Path) -> tuple[int, dict[str, Any]]:
    code = main([*args, "--termination-log", str(log)])
    return code, json.loads(log.read_text())


def test_tokenize_and_both_gates_read_and_write_the_run_root_in_s3(
    s3_prefix: str, tiny_target: TinyTarget, tmp_path: Path
) -> None:
    sources = upload_prompts(s3_prefix, tmp_path, count=12)
    run_root = f"{s3_prefix}/run"
    for shard in (0, 1):
        assert (
            regenerate_main(regen_args(run_root, sources, tiny_target, shard, tmp_path / "r", 6))
            == 0
        )
    args = [
        "--run-root",
        run_root,
        "--model",
        str(tiny_target.path),
        "--max-seq-len",
        "256",
        "--workers",
        "1",
        # 8 new tokens cut most answers: keep them (unterminated) so that all 12 are audited.
        "--truncated-answers",
        "keep",
    ]
    code, summary = run_json(tokenize_main, args, tmp_path / "t")
    assert code == 0 and summary["samples"] == 12 and summary["shards"] >= 2
    manifest = read_json(summary["manifestUri"])
    assert manifest["truncatedAnswers"]["policy"] == "keep"
    assert manifest["truncatedAnswers"]["dropped"] == 0 and manifest["truncatedAnswers"]["kept"] > 0
    for shard in manifest["shards"]:
        uri = f"{run_root}/tokenized/{shard['path']}"
        assert sha256_bytes(store_for(uri).read_bytes(uri)) == shard["sha256"]
    assert manifest["tokenizer"]["thinkEndId"] == tiny_target.think_end_id
    code, again = run_json(tokenize_main, args, tmp_path / "t2")
    assert code == 0 and again["skipped"] is True
    for gate in ("completions", "tokens"):
        code, result = run_json(
            audit_main, ["--run-root", run_root, "--gate", gate], tmp_path / gate
        )
        assert code == (0 if result["verdict"] == "pass" else 3)
        assert result["reportUri"] == f"{run_root}/audit/{gate}/report.json"
        report = read_json(result["reportUri"])
        assert report["overall"]["samples"] == 12 and report["gate"] == gate
        png = f"{run_root}/audit/{gate}/" + report["plots"][0]
        assert store_for(png).read_bytes(png)[:4] == b"\x89PNG"


@pytest.mark.parametrize("stage", ["regenerate", "audit"])
def test_a_missing_s3_object_exits_2_naming_it(
    stage: str, s3_prefix: str, tiny_target: TinyTarget, tmp_path: Path
) -> None:
    missing = f"{s3_prefix}/data/nope.jsonl"
    log = tmp_path / "log"
    if stage == "regenerate":
        sources = tmp_path / "sources.yaml"
        sources.write_text(f"- {{name: gone, uri: {missing}, format: prompt-only}}\n")
        code = regenerate_main(regen_args(f"{s3_prefix}/run", sources, tiny_target, 0, log, 4))
    else:
        code = audit_main([f"{s3_prefix}/tokenized", "--gate", "tokens", "--termination-log", str(log),
                           "--out", str(tmp_path / "out")])  # fmt: skip
        missing = f"{s3_prefix}/tokenized"
    assert code == 2
    message = json.loads(log.read_text())["message"]
    assert missing in message and "does not exist" in message
