"""Regeneration throughput of the transformers engine on CPU, tiny target (no download).

Measures samples/s and output tokens/s of batched generation (the engine as the stage runs it)
against the same engine generating one prompt at a time, both greedy with the same prompts and
answer length, plus the whole stage (ingest, render, generate, Parquet, commit) on one shard.
vLLM tokens/s needs a GPU: run tests/integration/data/test_vllm_engine_gpu.py there.

Usage: uv run python bench/bench_data_regenerate.py [--prompts N] [--max-tokens N] [--batch N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from dflash_trainer.data.regenerate.cli import main as regenerate_main
from dflash_trainer.data.regenerate.engine import SamplingSpec, generate_all
from dflash_trainer.data.regenerate.hf_engine import TransformersEngine
from dflash_trainer.data.target import context_length
from dflash_trainer.storage import read_json
from dflash_trainer.tiny.build import build_tiny_target
from dflash_trainer.tiny.prompts import build_prompt_records, tokenized_prompts


def measure(engine: TransformersEngine, prompts: list[list[int]]) -> tuple[float, int]:
    t0 = time.perf_counter()
    outputs = generate_all(engine, prompts)
    return time.perf_counter() - t0, sum(len(o.token_ids) for o in outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        target = build_tiny_target(Path(tmp) / "tiny")
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(target.path)
        prompts = tokenized_prompts(tokenizer, args.prompts, seed=3)
        records = build_prompt_records(args.prompts, seed=3)  # the same prompts, as a source
        sampling = SamplingSpec(temperature=0.0, max_tokens=args.max_tokens)
        context = context_length(str(target.path)) or 4096
        batched = TransformersEngine(
            str(target.path), tokenizer, sampling, target.eos_token_id, 0, context, args.batch
        )
        single = TransformersEngine(
            str(target.path), tokenizer, sampling, target.eos_token_id, 0, context, 1
        )
        measure(batched, prompts[:8])  # warm-up
        batched_s, batched_tokens = measure(batched, prompts)
        single_s, single_tokens = measure(single, prompts)
        batched.close()
        single.close()

        data = Path(tmp) / "prompts.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in records))
        sources = Path(tmp) / "sources.yaml"
        sources.write_text(f"- {{name: bench, uri: {data}, format: openai-messages}}\n")
        run_root = Path(tmp) / "run"
        t0 = time.perf_counter()
        regenerate_main([
            "--run-root", str(run_root), "--sources", str(sources), "--model", str(target.path),
            "--engine", "transformers", "--max-new-tokens", str(args.max_tokens), "--temperature", "0",
            "--batch-size", str(args.batch), "--threads", str(args.threads), "--part-rows", "64",
            "--progress-seconds", "1000", "--termination-log", str(Path(tmp) / "log"),
        ])  # fmt: skip
        stage_s = time.perf_counter() - t0
        commit = read_json(str(run_root / "regen" / "shard-00000.commit.json"))

    n = len(prompts)
    print(f"tiny Qwen3 target ({target.layers} layers, hidden {target.hidden}), {n} prompts, "
          f"{args.max_tokens} new tokens max, CPU threads {args.threads}")  # fmt: skip
    print(
        f"one prompt at a time: {n / single_s:.2f} samples/s, {single_tokens / single_s:.0f} tokens/s"
    )
    print(
        f"batched ({args.batch}): {n / batched_s:.2f} samples/s, {batched_tokens / batched_s:.0f} tokens/s"
    )
    print(f"stage end to end (ingest, render, generate, Parquet, commit; model load included): "
          f"{commit['samples'] / stage_s:.2f} samples/s, {commit['outputTokens'] / stage_s:.0f} tokens/s")  # fmt: skip
    print(f"RATIO batched / one at a time: {(n / batched_s) / (n / single_s):.1f}x samples/s")
    print("vLLM tokens/s: not measured here (no GPU in this environment)")


if __name__ == "__main__":
    main()
