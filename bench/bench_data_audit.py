"""Token-audit speed and memory at the incident's scale, against a per-row Python audit.

Builds (once, under ~/.cache/dflash/bench) a seed-scale tokenized dataset shaped like the
incident's: 913,786 samples, ~260M tokens, Arrow IPC in 1,000-row batches like a HF
`save_to_disk` folder, 5 sources of which 2 hold 87% stubs. Then, pinned to one core:

1. `dflash-audit <folder> --gate tokens` on the whole dataset and on a quarter of it, in a fresh
   process each (wall time, peak RSS): linear scaling gives the 1.64B-token figure;
2. a straightforward per-row Python audit (the same metrics, one row at a time) on a subset,
   and our vectorized accumulator on the same subset in the same process.

Prints each figure as a ratio against the per-row baseline measured in the same run.
Usage: uv run python bench/bench_data_audit.py [--samples N] [--subset N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from audit_process import ONE_CORE, run_cli_audit
from dflash_trainer.data.audit.cli import COALESCE_ROWS
from dflash_trainer.data.audit.dataset import coalesce, iter_batches, resolve_files
from dflash_trainer.data.audit.metrics_tokens import TokenAuditSettings, TokensAccumulator
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.audit.vocab import VocabInfo
from dflash_trainer.tiny.datasets import IncidentShape, TokenLayout, build_incident_tokens

SEED_SAMPLES = 913_786  # the incident's dataset
POST_REGEN_TOKENS = 1_640_000_000  # the regenerated dataset of the incident story
CHUNKS = 8
HF_BATCH_ROWS = 1000  # datasets' default writer batch size
# prompt lengths chosen so the dataset holds ~260M tokens like the incident's 1.3 GB Arrow
SHAPE = IncidentShape(prompt_tokens=(20, 280))
LAYOUT = TokenLayout()
# What the tokenize stage records of the vocabulary: think tags, whitespace ids and the
# assistant header, so that every check of the gate runs (as in a pipeline run).
VOCAB = VocabInfo(
    think_start=LAYOUT.think_start,
    think_end=LAYOUT.think_end,
    end_of_turn=LAYOUT.im_end,
    whitespace_ids=(LAYOUT.newline, LAYOUT.double_newline),
    assistant_header=(LAYOUT.im_start, LAYOUT.assistant, LAYOUT.newline),
    vocab_size=LAYOUT.vocab_size + 32,
)
TOKENIZER_INFO = VOCAB.to_manifest()
COLUMNS = ["source", "input_ids", "loss_mask"]
CACHE = Path(os.environ.get("DFLASH_BENCH_DIR", Path.home() / ".cache" / "dflash" / "bench"))


def build_dataset(folder: Path, samples: int) -> int:
    """Write the dataset once; returns its token count (read back from the manifest)."""
    manifest = folder / "_SUCCESS.json"
    if manifest.exists() and json.loads(manifest.read_text()).get("samples") == samples:
        body = json.loads(manifest.read_text())
        body["tokenizer"] = TOKENIZER_INFO  # the vocabulary facts may be newer than the data
        manifest.write_text(json.dumps(body))
        return int(body["tokens"])
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shards, tokens = [], 0
    per_chunk = -(-samples // CHUNKS)
    for chunk in range(CHUNKS):
        n = min(per_chunk, samples - chunk * per_chunk)
        table = build_incident_tokens(n, seed=chunk, shape=SHAPE, layout=LAYOUT)
        name = f"data-{chunk:05d}-of-{CHUNKS:05d}.arrow"
        with (
            pa.OSFile(str(folder / name), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as writer,
        ):
            for batch in table.to_batches(max_chunksize=HF_BATCH_ROWS):
                writer.write_batch(batch)
        chunk_tokens = int(pc.sum(table.column("seq_len")).as_py())
        tokens += chunk_tokens
        shards.append({"path": name, "rows": n, "tokens": chunk_tokens})
        print(f"  wrote {name}: {n:,} samples, {chunk_tokens:,} tokens", flush=True)
    body = {"shards": shards, "samples": samples, "tokens": tokens, "tokenizer": TOKENIZER_INFO}
    manifest.write_text(json.dumps(body))
    return tokens


def write_subset_manifest(seed: Path, folder: Path, chunks: int) -> int:
    """A folder whose manifest lists the first `chunks` files of the seed dataset."""
    data = json.loads((seed / "_SUCCESS.json").read_text())
    shards = [dict(s, path=f"../{seed.name}/{s['path']}") for s in data["shards"][:chunks]]
    folder.mkdir(parents=True, exist_ok=True)
    tokens = int(sum(s["tokens"] for s in shards))
    (folder / "_SUCCESS.json").write_text(json.dumps(data | {"shards": shards, "tokens": tokens}))
    return tokens


def per_row_audit(rows: list[dict[str, Any]], block: int, think_end: int) -> dict[str, Any]:
    """The straightforward implementation: Python over each row's lists, every check of the
    gate (anchors, thinking spans without whitespace, loops, duplicates, the mask check)."""
    thresholds = Thresholds()
    whitespace = set(VOCAB.whitespace_ids)
    header = list(VOCAB.assistant_header)
    per_source: dict[str, Counter[str]] = defaultdict(Counter)
    sums: dict[str, Counter[int]] = defaultdict(Counter)
    seen: dict[str, set[int]] = defaultdict(set)
    for row in rows:
        ids, mask, src = row["input_ids"], row["loss_mask"], row["source"]
        total = sum(mask)
        best = run = 0
        for m in mask:
            run = run + 1 if m else 0
            best = max(best, run)
        first = mask.index(1) if total else -1
        end = next(
            (i for i, (t, m) in enumerate(zip(ids, mask, strict=True)) if m and t == think_end), -1
        )
        supervised = [t for t, m in zip(ids, mask, strict=True) if m]
        c = per_source[src]
        c["samples"] += 1
        c["tokens"] += len(ids)
        c["supervised"] += total
        c["stub"] += total < thresholds.stub_tokens
        c["no_anchor"] += best < block + 1
        c["thinking_missing"] += end < 0 and total > 0
        if end >= 0:
            opens = int(ids[first] == LAYOUT.think_start)
            thinking = sum(1 for t in ids[first + opens : end] if t not in whitespace)
            c["empty_thinking"] += thinking == 0
            c["near_empty_thinking"] += 0 < thinking < thresholds.min_thinking_tokens
        grams = [tuple(supervised[k : k + 4]) for k in range(len(supervised) - 3)]
        if len(grams) >= 16:
            c["loop"] += (len(grams) - len(set(grams))) > thresholds.loop_ngram_share * len(grams)
        key = hash(tuple(supervised))
        c["duplicate"] += key in seen[src]
        seen[src].add(key)
        starts = [i for i, t in enumerate(ids) if t == header[0]]
        before = [h for h in starts if h <= first]
        ok = total == 0 or (
            bool(before)
            and ids[before[-1] : before[-1] + len(header)] == header
            and first >= before[-1] + len(header)
            and not any(mask[h] for h in starts)
        )
        c["mask_error"] += not ok
        sums[src][total] += 1
    return {"sources": dict(per_source), "modes": {s: c.most_common(1)[0] for s, c in sums.items()}}


def vectorized_audit(batches: list[pa.RecordBatch]) -> Any:
    settings = TokenAuditSettings(16, None, LAYOUT.think_start, LAYOUT.think_end, VOCAB)
    acc = TokensAccumulator(settings, Thresholds())
    for batch in batches:
        acc.add(batch)
    return acc.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=SEED_SAMPLES)
    parser.add_argument("--subset", type=int, default=50_000, help="rows for the per-row baseline")
    args = parser.parse_args()
    if ONE_CORE:
        os.sched_setaffinity(0, {0})
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    seed = CACHE / f"audit-seed-{args.samples}"
    print(f"dataset: {seed}", flush=True)
    tokens = build_dataset(seed, args.samples)
    quarter = CACHE / f"audit-quarter-{args.samples}"
    quarter_tokens = write_subset_manifest(seed, quarter, CHUNKS // 4)
    size_gb = sum(f.stat().st_size for f in seed.glob("*.arrow")) / 1e9
    print(f"  {args.samples:,} samples, {tokens:,} tokens, {size_gb:.2f} GB of Arrow", flush=True)

    # Baseline and ours on the same subset, in this process, one core.
    batches, rows = [], 0
    for batch in iter_batches(resolve_files(str(seed)), COLUMNS, HF_BATCH_ROWS):
        batches.append(batch)
        rows += batch.num_rows
        if rows >= args.subset:
            break
    subset_rows = sum(b.num_rows for b in batches)
    t0 = time.perf_counter()
    pylists = [r for b in batches for r in b.to_pylist()]
    baseline = per_row_audit(pylists, 16, LAYOUT.think_end)
    baseline_s = time.perf_counter() - t0
    joined = list(coalesce(iter(batches), COALESCE_ROWS))  # as the CLI reads them
    vectorized_audit(joined)  # warm-up: first-call allocations are not the steady state
    t0 = time.perf_counter()
    ours = vectorized_audit(joined)
    ours_subset_s = time.perf_counter() - t0
    for name, counts in baseline["sources"].items():  # both implementations agree
        assert ours.sources[name].samples == counts["samples"]
        group = ours.sources[name]
        for check, key in (("stub_rate", "stub"), ("repetition_rate", "loop"),
                           ("duplicate_completion_rate", "duplicate"),
                           ("near_empty_thinking_rate", "near_empty_thinking"),
                           ("mask_error_rate", "mask_error")):  # fmt: skip
            trials = group.counts[check][1] if check in group.counts else counts["samples"]
            assert round(group.values.get(check, 0.0) * trials) == counts[key], (name, check)
    baseline_full_s = baseline_s * args.samples / subset_rows
    del pylists, batches

    # Reading alone (both implementations must read the data): added to the scaled baseline.
    files = resolve_files(str(seed))
    t0 = time.perf_counter()
    for _ in iter_batches(files, COLUMNS, HF_BATCH_ROWS):
        pass
    read_s = time.perf_counter() - t0
    baseline_full_s += read_s

    # Ours on everything, in this process: reading from disk included, report excluded.
    t0 = time.perf_counter()
    vectorized_audit(coalesce(iter_batches(files, COLUMNS, HF_BATCH_ROWS), COALESCE_ROWS))  # type: ignore[arg-type]
    ours_full_s = time.perf_counter() - t0

    full = run_cli_audit(seed, "--gate", "tokens")
    part = run_cli_audit(quarter, "--gate", "tokens")
    per_token = (full["audit_s"] - part["audit_s"]) / (tokens - quarter_tokens)
    post_regen_s = full["audit_s"] + per_token * (POST_REGEN_TOKENS - tokens)

    print(f"\nper-row Python baseline: {baseline_s:.2f} s for {subset_rows:,} rows "
          f"-> {baseline_full_s:.0f} s for {args.samples:,} (scaled, + {read_s:.2f} s to read them)")  # fmt: skip
    print(f"vectorized, same {subset_rows:,} rows: {ours_subset_s:.3f} s "
          f"= {baseline_s / ours_subset_s:.0f}x faster than per-row")  # fmt: skip
    print(f"vectorized, all {args.samples:,} rows read from disk: {ours_full_s:.2f} s "
          f"({ours_full_s / tokens * 1e9:.1f} ns per token)")  # fmt: skip
    print(
        f"RATIO vectorized vs per-row Python, same {subset_rows:,} rows: {baseline_s / ours_subset_s:.0f}x"
    )
    print(f"RATIO seed-scale audit (read + compute) vs per-row baseline: {baseline_full_s / ours_full_s:.0f}x "
          "(goal >= 50x)")  # fmt: skip
    for label, run, n in (("quarter", part, quarter_tokens), ("seed", full, tokens)):
        print(f"dflash-audit {label} ({n / 1e6:.0f}M tokens, 1 core): wall {run['wall_s']:.1f} s "
              f"(audit {run['audit_s']:.1f} s), peak RSS {run['peak_rss_mb']:.0f} MB, exit {run['exit']}, "
              f"violations {run['violations']}")  # fmt: skip
    print(f"RATIO dflash-audit end to end (fresh process, report, plots, examples) vs per-row baseline: "
          f"{baseline_full_s / full['wall_s']:.0f}x (wall {full['wall_s']:.1f} s, goal <= 10 s; "
          f"peak RSS {full['peak_rss_mb']:.0f} MB, goal <= 1024 MB)")  # fmt: skip
    post_wall = full["wall_s"] + per_token * (POST_REGEN_TOKENS - tokens)
    print(f"scaling: {per_token * 1e9:.2f} s per 1B tokens -> 1.64B-token dataset: audit ~{post_regen_s:.0f} s, "
          f"wall ~{post_wall:.0f} s, RSS flat (streamed)")  # fmt: skip
    ratio = np.float64(baseline_full_s) / ours_full_s
    print(
        json.dumps(
            {
                "ratio_vs_per_row": round(float(ratio), 1),
                **{f"seed_{k}": v for k, v in full.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
