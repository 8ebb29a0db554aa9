"""Completions-gate speed and memory at the incident's scale, against a per-row Python audit.

Builds (once, under ~/.cache/dflash/bench) 913,786 regenerated completions shaped like the
incident's (5 sources, 2 of them 87% stubs; healthy rows ~190 generated tokens with the
engine's ids and their text), as 8 Parquet parts with a commit manifest like regen/. Then,
pinned to one core:

1. `dflash-audit <folder> --gate completions --max-new-tokens 4096` on everything and on a
   quarter, in a fresh process each (wall time, peak RSS): scaling to the 1.64B generated
   tokens of the regenerated dataset comes from the two;
2. a straightforward per-row Python audit (the same metrics: lengths and stubs, empty and
   near-empty thinking, duplicates after case/whitespace folding, 4-gram loops, scripts of
   prompt and answer, silent truncation) on a subset, and our accumulator on the same subset.

Prints each figure as a ratio against the per-row baseline measured in the same run.
Usage: uv run python bench/bench_data_completions.py [--samples N] [--subset N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from audit_process import ONE_CORE, run_cli_audit
from dflash_trainer.data.audit.completion_features import CompletionSettings
from dflash_trainer.data.audit.dataset import iter_batches, resolve_files
from dflash_trainer.data.audit.metrics_completions import CompletionsAccumulator
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.audit.vocab import VocabInfo
from dflash_trainer.tiny.datasets import IncidentShape, TokenLayout, build_incident_completions

SEED_SAMPLES = 913_786
POST_REGEN_TOKENS = 1_640_000_000
CHUNKS = 8
BATCH_ROWS = 2048
MAX_NEW_TOKENS = 4096
LAYOUT = TokenLayout()
VOCAB = VocabInfo(
    think_start=LAYOUT.think_start,
    think_end=LAYOUT.think_end,
    end_of_turn=LAYOUT.im_end,
    whitespace_ids=(LAYOUT.newline, LAYOUT.double_newline),
    vocab_size=LAYOUT.vocab_size + 32,
)
CACHE = Path(os.environ.get("DFLASH_BENCH_DIR", Path.home() / ".cache" / "dflash" / "bench"))
COLUMNS = CompletionsAccumulator.columns()


def build_dataset(folder: Path, samples: int) -> int:
    """Write the parts and their commit once; returns the generated tokens."""
    commit = folder / "shard-00000.commit.json"
    if commit.exists() and json.loads(commit.read_text()).get("samples") == samples:
        return int(json.loads(commit.read_text())["outputTokens"])
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "shard-00000").mkdir(parents=True)
    files, tokens = [], 0
    per_chunk = -(-samples // CHUNKS)
    for chunk in range(CHUNKS):
        n = min(per_chunk, samples - chunk * per_chunk)
        table = build_incident_completions(n, seed=chunk, shape=IncidentShape(), layout=LAYOUT)
        name = f"shard-00000/part-{chunk:05d}.parquet"
        pq.write_table(table, folder / name, compression="zstd", row_group_size=BATCH_ROWS)
        chunk_tokens = int(pa.compute.sum(table.column("num_output_tokens")).as_py())
        tokens += chunk_tokens
        files.append({"path": name, "rows": n})
        print(f"  wrote {name}: {n:,} completions, {chunk_tokens:,} generated tokens", flush=True)
    body = {"shard": 0, "shards": 1, "samples": samples, "outputTokens": tokens, "files": files}
    commit.write_text(json.dumps(body))
    return tokens


def write_quarter(seed: Path, folder: Path) -> int:
    commit = json.loads((seed / "shard-00000.commit.json").read_text())
    files = [dict(f, path=f"../{seed.name}/{f['path']}") for f in commit["files"][: CHUNKS // 4]]
    folder.mkdir(parents=True, exist_ok=True)
    rows = sum(f["rows"] for f in files)
    (folder / "shard-00000.commit.json").write_text(json.dumps(commit | {"files": files}))
    return rows


WS = re.compile(r"[ \t\n\x0b\x0c\r]+")


def _letters_by_script(text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for ch in text:
        if not ch.isalpha():
            continue
        cp = ord(ch)
        out[
            "latin"
            if cp < 0x250
            else "cyrillic"
            if 0x400 <= cp < 0x530
            else "han"
            if 0x4E00 <= cp < 0xA000
            else "other"
        ] += 1
    return out


def per_row_audit(rows: list[dict[str, Any]], thresholds: Thresholds) -> dict[str, Any]:
    """The straightforward implementation: Python over each row's texts and ids."""
    per_source: dict[str, Counter[str]] = defaultdict(Counter)
    lengths: dict[str, list[int]] = defaultdict(list)
    seen: dict[str, set[int]] = defaultdict(set)
    whitespace = set(VOCAB.whitespace_ids)
    for row in rows:
        c = per_source[row["source"]]
        ids = row["output_token_ids"] or []
        tokens = row["num_output_tokens"]
        reasoning, response = row["reasoning"] or "", row["response"] or ""
        c["samples"] += 1
        c["stub"] += tokens < thresholds.stub_tokens
        c["empty_response"] += not response.strip()
        c["truncated"] += row["finish_reason"] == "length"
        c["silent"] += row["finish_reason"] != "length" and tokens >= MAX_NEW_TOKENS
        end = ids.index(VOCAB.think_end) if VOCAB.think_end in ids else 0
        thinking = sum(1 for t in ids[:end] if t not in whitespace and t != VOCAB.think_start)
        c["empty_thinking"] += not reasoning.strip()
        c["near_empty"] += bool(reasoning.strip()) and thinking < thresholds.min_thinking_tokens
        key = hash(WS.sub(" ", (reasoning + "\x1f" + response).lower()).strip())
        c["duplicate"] += key in seen[row["source"]]
        seen[row["source"]].add(key)
        grams = [tuple(ids[k : k + 4]) for k in range(len(ids) - 3)]
        if len(grams) >= 16:
            c["loop"] += (len(grams) - len(set(grams))) > thresholds.loop_ngram_share * len(grams)
        prompt, answer = (
            _letters_by_script(row["prompt"][-300:]),
            _letters_by_script(response[:300]),
        )
        if sum(prompt.values()) >= 16 and sum(answer.values()) >= 16:
            main = {s for s, n in prompt.items() if n >= 0.2 * sum(prompt.values())}
            c["wrong_language"] += sum(answer[s] for s in main) < 0.1 * sum(answer.values())
        lengths[row["source"]].append(tokens)
    quantiles = {s: sorted(v)[len(v) // 10] for s, v in lengths.items()}
    return {"sources": dict(per_source), "p10": quantiles}


def vectorized_audit(batches: Any) -> Any:
    acc = CompletionsAccumulator(Thresholds(), CompletionSettings(VOCAB, MAX_NEW_TOKENS))
    for batch in batches:
        acc.add(batch)
    return acc.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=SEED_SAMPLES)
    parser.add_argument("--subset", type=int, default=20_000, help="rows for the per-row baseline")
    args = parser.parse_args()
    if ONE_CORE:
        os.sched_setaffinity(0, {0})
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    seed = CACHE / f"completions-seed-{args.samples}"
    print(f"dataset: {seed}", flush=True)
    tokens = build_dataset(seed, args.samples)
    quarter = CACHE / f"completions-quarter-{args.samples}"
    quarter_rows = write_quarter(seed, quarter)
    size_gb = sum(f.stat().st_size for f in seed.rglob("*.parquet")) / 1e9
    print(
        f"  {args.samples:,} completions, {tokens:,} generated tokens, {size_gb:.2f} GB of Parquet"
    )

    files = resolve_files(str(seed))
    batches, rows = [], 0
    for batch in iter_batches(files, COLUMNS, BATCH_ROWS):
        batches.append(batch)
        rows += batch.num_rows
        if rows >= args.subset:
            break
    subset_rows = sum(b.num_rows for b in batches)
    t0 = time.perf_counter()
    baseline = per_row_audit([r for b in batches for r in b.to_pylist()], Thresholds())
    baseline_s = time.perf_counter() - t0
    vectorized_audit(batches)  # warm-up
    t0 = time.perf_counter()
    ours = vectorized_audit(batches)
    ours_subset_s = time.perf_counter() - t0
    for name, counts in baseline["sources"].items():  # both implementations agree
        group = ours.sources[name]
        assert group.samples == counts["samples"]
        for check, key in (("stub_rate", "stub"), ("near_empty_thinking_rate", "near_empty"),
                           ("duplicate_completion_rate", "duplicate")):  # fmt: skip
            assert round(group.values[check] * counts["samples"]) == counts[key], (name, check)
    del batches

    t0 = time.perf_counter()
    for _ in iter_batches(files, COLUMNS, BATCH_ROWS):
        pass
    read_s = time.perf_counter() - t0
    baseline_full_s = baseline_s * args.samples / subset_rows + read_s
    t0 = time.perf_counter()
    vectorized_audit(iter_batches(files, COLUMNS, BATCH_ROWS))
    ours_full_s = time.perf_counter() - t0

    full = run_cli_audit(seed, "--gate", "completions", "--max-new-tokens", str(MAX_NEW_TOKENS))
    part = run_cli_audit(quarter, "--gate", "completions", "--max-new-tokens", str(MAX_NEW_TOKENS))
    per_row_s = (full["audit_s"] - part["audit_s"]) / (args.samples - quarter_rows)
    per_token = per_row_s * args.samples / tokens
    post_regen_s = full["audit_s"] + per_token * (POST_REGEN_TOKENS - tokens)

    print(f"\nper-row Python baseline: {baseline_s:.2f} s for {subset_rows:,} rows "
          f"-> {baseline_full_s:.0f} s for {args.samples:,} (scaled, + {read_s:.1f} s to read them)")  # fmt: skip
    print(
        f"RATIO vectorized vs per-row Python, same {subset_rows:,} rows: {baseline_s / ours_subset_s:.0f}x"
    )
    print(f"vectorized, all {args.samples:,} rows read from disk: {ours_full_s:.1f} s")
    print(f"RATIO seed-scale completions audit (read + compute) vs per-row baseline: "
          f"{baseline_full_s / ours_full_s:.0f}x")  # fmt: skip
    for label, run, n in (("quarter", part, quarter_rows), ("seed", full, args.samples)):
        print(f"dflash-audit --gate completions {label} ({n:,} rows, 1 core): wall {run['wall_s']:.1f} s "
              f"(audit {run['audit_s']:.1f} s), peak RSS {run['peak_rss_mb']:.0f} MB, exit {run['exit']}, "
              f"violations {run['violations']}")  # fmt: skip
    print(f"RATIO dflash-audit completions end to end vs per-row baseline: "
          f"{baseline_full_s / full['wall_s']:.0f}x (wall {full['wall_s']:.1f} s, peak RSS {full['peak_rss_mb']:.0f} MB)")  # fmt: skip
    print(f"scaling: {per_token * 1e9:.1f} s per 1B generated tokens -> the 1.64B-token regenerated "
          f"dataset: audit ~{post_regen_s:.0f} s on one core, RSS flat (streamed)")  # fmt: skip


if __name__ == "__main__":
    main()
