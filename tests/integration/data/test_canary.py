"""The canary: a fixed sample of every source regenerated first, judged by the completions gate
on its own, and reused by the shards (nothing generated twice)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from dflash_trainer.data.audit.cli import main as audit_main
from dflash_trainer.data.regenerate.canary import canary_store
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.shard_store import ShardStore
from dflash_trainer.tiny.build import TinyTarget
from dflash_trainer.tiny.prompts import build_prompt_records

PER_SOURCE = 10
CANARY = 3
SHARDS = 2


def write_sources(tmp_path: Path) -> Path:
    lines = []
    for seed, name in enumerate(("alpha", "beta")):
        data = tmp_path / f"{name}.jsonl"
        records = build_prompt_records(PER_SOURCE, seed=seed + 11)
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        lines.append(f"- {{name: {name}, uri: {data}, format: openai-messages}}\n")
    sources = tmp_path / "sources.yaml"
    sources.write_text("".join(lines))
    return sources


def regenerate(
    run_root: Path, sources: Path, target: TinyTarget, log: Path, *extra: str
) -> dict[str, Any]:
    code = regenerate_main([
        "--run-root", str(run_root), "--sources", str(sources), "--model", str(target.path),
        "--engine", "transformers", "--max-new-tokens", "12", "--temperature", "0",
        "--threads", "1", "--progress-seconds", "0", "--termination-log", str(log), *extra,
    ])  # fmt: skip
    summary: dict[str, Any] = json.loads(log.read_text())
    assert code == 0, summary
    return summary


def rows_of(store: ShardStore) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for uri in store.part_uris() for r in pq.read_table(uri).to_pylist()}


def test_the_canary_samples_every_source_and_the_shards_reuse_its_answers(
    tiny_target: TinyTarget, tmp_path: Path
) -> None:
    sources = write_sources(tmp_path)
    run_root = tmp_path / "run"
    summary = regenerate(
        run_root, sources, tiny_target, tmp_path / "c", "--canary-samples-per-source", str(CANARY)
    )
    assert summary["canary"] is True and summary["samples"] == 2 * CANARY
    canary = rows_of(canary_store(str(run_root)))
    assert sorted(r["source"] for r in canary.values()) == ["alpha"] * CANARY + ["beta"] * CANARY
    # The canary is fixed: a rerun does nothing, and the same sample would be chosen again.
    again = regenerate(
        run_root, sources, tiny_target, tmp_path / "c2", "--canary-samples-per-source", str(CANARY)
    )
    assert again["skipped"] is True
    # The completions gate judges the canary alone, in its own report folder.
    log = tmp_path / "audit.log"
    code = audit_main([
        str(run_root / "canary" / "regen"), "--gate", "completions", "--out",
        str(run_root / "audit" / "canary"), "--model", str(tiny_target.path),
        "--termination-log", str(log),
    ])  # fmt: skip
    report = json.loads((run_root / "audit" / "canary" / "report.json").read_text())
    assert code in (0, 3) and report["overall"]["samples"] == 2 * CANARY
    # The fan-out: each shard copies its canary rows and generates only the rest.
    reused = 0
    full: dict[str, dict[str, Any]] = {}
    for shard in range(SHARDS):
        summary = regenerate(
            run_root, sources, tiny_target, tmp_path / f"s{shard}",
            "--shards", str(SHARDS), "--shard", str(shard),
        )  # fmt: skip
        reused += summary["fromCanary"]
        full |= rows_of(ShardStore(str(run_root), shard, SHARDS))
    assert reused == 2 * CANARY
    assert len(full) == 2 * PER_SOURCE
    for row_id, row in canary.items():
        assert full[row_id] == row, "a canary answer was generated again"


def test_a_canary_made_with_other_settings_is_never_reused_and_is_redone_on_retry(
    tiny_target: TinyTarget, tmp_path: Path
) -> None:
    sources = write_sources(tmp_path)
    run_root = tmp_path / "run"
    canary = ("--canary-samples-per-source", str(CANARY))
    regenerate(run_root, sources, tiny_target, tmp_path / "c", *canary)
    first = rows_of(canary_store(str(run_root)))
    # The shards run with another generation limit: the canary's answers are not theirs.
    summary = regenerate(
        run_root, sources, tiny_target, tmp_path / "s", "--shards", "1", "--max-new-tokens", "6"
    )
    assert summary["fromCanary"] == 0 and summary["samples"] == 2 * PER_SOURCE
    # A retried canary under the new settings starts over instead of reporting "committed".
    summary = regenerate(run_root, sources, tiny_target, tmp_path / "c2", *canary,
                         "--max-new-tokens", "6")  # fmt: skip
    assert summary["skipped"] is False and summary["samples"] == 2 * CANARY
    again = rows_of(canary_store(str(run_root)))
    assert again.keys() == first.keys()
    assert all(r["num_output_tokens"] <= 6 for r in again.values())
