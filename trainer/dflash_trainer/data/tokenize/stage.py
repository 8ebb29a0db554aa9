"""Tokenize every committed regeneration part into one tokenized shard each, in parallel, then
write `tokenized/_SUCCESS.json` last (contract section 4). A finished shard is never redone
unless the settings that produced it changed.

    <run-root>/tokenized/shard-00000.parquet        one per input part, in sorted input order
    <run-root>/tokenized/_stats/shard-00000.json    its counts and settings fingerprint
    <run-root>/tokenized/_SUCCESS.json              shards (sha256, rows, tokens) and totals
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from dflash_trainer.data.audit.dataset import iter_batches, resolve_files
from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.tokenize.core import (
    TOKENIZED_SCHEMA,
    RowTokenizer,
    TokenizeCounts,
    TokenizeSettings,
)
from dflash_trainer.storage import join_uri, read_json, sha256_file, store_for, write_json

INPUT_COLUMNS = ["id", "source", "prompt", "response", "reasoning", "output_token_ids",
                 "finish_reason", "num_output_tokens"]  # fmt: skip
READ_BATCH_ROWS = 1024
MANIFEST = "_SUCCESS.json"


@dataclass(frozen=True)
class StageSettings:
    model_dir: str
    revision: str | None
    chat_template: str | None  # override text, else the tokenizer's
    tokenize: TokenizeSettings

    def fingerprint(self, template_source: str) -> str:
        blob = json.dumps(
            {
                "model": self.model_dir,
                "revision": self.revision,
                "template": template_source,
                **asdict(self.tokenize),
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ShardJob:
    index: int
    input_uri: str
    output_uri: str
    stats_uri: str


_WORKER: dict[str, Any] = {}


def _load(settings: StageSettings) -> tuple[RowTokenizer, str]:
    from dflash_trainer.data.target import load_tokenizer

    tokenizer = load_tokenizer(settings.model_dir, settings.revision)
    template = ChatTemplate.from_tokenizer(tokenizer, settings.chat_template)
    return RowTokenizer(tokenizer, template, settings.tokenize), template.source


def _init_worker(settings: StageSettings) -> None:
    # Parallelism comes from processes here; tokenizers' own threads would only oversubscribe.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER["row_tokenizer"], _WORKER["template"] = _load(settings)


def tokenize_shard(job: ShardJob, row_tokenizer: RowTokenizer, fingerprint: str) -> dict[str, Any]:
    """Tokenize one input part into one output shard (streamed), then write its stats."""
    counts = TokenizeCounts()
    store = store_for(job.output_uri)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "shard.parquet"
        with pq.ParquetWriter(local, TOKENIZED_SCHEMA, compression="zstd") as writer:
            for batch in iter_batches([job.input_uri], INPUT_COLUMNS, READ_BATCH_ROWS):
                table, batch_counts = row_tokenizer.tokenize(batch.to_pylist())
                counts.add(batch_counts)
                if table.num_rows:
                    writer.write_table(table)
        stats = {
            "index": job.index,
            "input": job.input_uri,
            "path": job.output_uri.rsplit("/", 1)[-1],
            "sha256": sha256_file(local),
            "bytes": local.stat().st_size,
            "rows": counts.samples,
            "tokens": counts.tokens,
            "supervisedTokens": counts.supervised_tokens,
            "truncated": counts.truncated,
            "driftChecked": counts.drift_checked,
            "drift": counts.drift,
            "fromEngineIds": counts.from_engine_ids,
            "cutAnswers": {src: dict(c) for src, c in sorted(counts.cut_answers.items())},
            "templateMismatches": dict(counts.mismatches),
            "mismatchExamples": counts.mismatch_examples,
            "fingerprint": fingerprint,
        }
        store.upload_file(local, job.output_uri)
    write_json(job.stats_uri, stats)
    return stats


def _run_in_worker(job: ShardJob, fingerprint: str) -> dict[str, Any]:
    return tokenize_shard(job, _WORKER["row_tokenizer"], fingerprint)


def plan_jobs(input_uri: str, output_root: str) -> list[ShardJob]:
    files = resolve_files(input_uri)
    return [
        ShardJob(
            index=i,
            input_uri=uri,
            output_uri=join_uri(output_root, f"shard-{i:05d}.parquet"),
            stats_uri=join_uri(output_root, "_stats", f"shard-{i:05d}.json"),
        )
        for i, uri in enumerate(files)
    ]


def is_shard_done(job: ShardJob, fingerprint: str) -> dict[str, Any] | None:
    store = store_for(job.stats_uri)
    if not (store.exists(job.stats_uri) and store.exists(job.output_uri)):
        return None
    stats = read_json(job.stats_uri)
    if (
        not isinstance(stats, dict)
        or stats.get("fingerprint") != fingerprint
        or stats.get("input") != job.input_uri
    ):
        return None
    return stats


def run_shards(
    jobs: list[ShardJob], settings: StageSettings, workers: int
) -> tuple[list[dict[str, Any]], int]:
    """Stats of every shard (done ones reused); returns (stats in index order, shards reused)."""
    row_tokenizer, template_source = _load(settings)
    fingerprint = settings.fingerprint(template_source)
    done = {job.index: is_shard_done(job, fingerprint) for job in jobs}
    todo = [job for job in jobs if done[job.index] is None]
    results: dict[int, dict[str, Any]] = {i: s for i, s in done.items() if s is not None}
    if workers <= 1 or len(todo) <= 1:
        for job in todo:
            results[job.index] = tokenize_shard(job, row_tokenizer, fingerprint)
    else:
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(min(workers, len(todo)), ctx, _init_worker, (settings,)) as pool:
            futures = {job.index: pool.submit(_run_in_worker, job, fingerprint) for job in todo}
            for index, future in futures.items():
                results[index] = future.result()
    return [results[job.index] for job in jobs], len(jobs) - len(todo)


def build_manifest(
    stats: list[dict[str, Any]], settings: StageSettings, extra: dict[str, Any]
) -> dict[str, Any]:
    def total(key: str) -> int:
        return sum(int(s.get(key, 0)) for s in stats)

    mismatches: dict[str, int] = {}
    cut: dict[str, dict[str, int]] = {}
    for s in stats:
        for kind, n in s.get("templateMismatches", {}).items():
            mismatches[kind] = mismatches.get(kind, 0) + int(n)
        for source, counts in s.get("cutAnswers", {}).items():
            mine = cut.setdefault(source, {"dropped": 0, "kept": 0, "probable": 0})
            for key, n in counts.items():
                mine[key] = mine.get(key, 0) + int(n)
    return {
        "shards": [
            {k: s[k] for k in ("path", "sha256", "bytes", "rows", "tokens", "supervisedTokens")}
            for s in stats
        ],
        "samples": total("rows"),
        "tokens": total("tokens"),
        "supervisedTokens": total("supervisedTokens"),
        "truncated": total("truncated"),
        "driftChecked": total("driftChecked"),
        "drift": total("drift"),
        "templateMismatches": mismatches,
        "fromEngineIds": total("fromEngineIds"),
        "truncatedAnswers": {
            "policy": settings.tokenize.truncated_answers,
            "dropped": sum(c["dropped"] for c in cut.values()),
            "kept": sum(c["kept"] for c in cut.values()),
            "probable": sum(c["probable"] for c in cut.values()),
            "perSource": cut,
        },
        "maxSeqLen": settings.tokenize.max_seq_len,
        "enableThinking": settings.tokenize.enable_thinking,
        "supervise": settings.tokenize.supervise,
        **extra,
    }
