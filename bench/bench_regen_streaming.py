"""Engine forward passes per shard: the whole shard streamed against the chunked runner.

1. CPU, transformers engine, tiny target (no download): the same prompts through the engine with
   continuous batching (`batch` slots refilled as answers finish: the streaming runner) and with
   static batches of `batch` prompts, each waiting for its slowest answer (the chunked runner).
   Sampled at temperature 1 the random tiny target draws its end of turn about once in ~450
   tokens (its vocabulary), so answers end at geometric, widely varied lengths under the default
   max_tokens of 512. Forward passes are counted with a hook.
2. A simulation of vLLM slots: `--slots` requests decode one token per step, a finished request's
   slot takes the next prompt. Answer lengths are lognormal (the shape of thinking traces) capped
   at max_tokens. Chunked = `generate` on 2,000 prompts at a time; streamed = one queue.

Each figure is printed as a ratio against the chunked baseline measured in the same run.
Usage: uv run python bench/bench_regen_streaming.py [--prompts N] [--max-tokens N] [--batch N]
       [--shard-prompts N] [--slots N] [--chunk N] [--median N] [--sigma S] [--skip-cpu]
"""

from __future__ import annotations

import argparse
import heapq
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from dflash_trainer.data.regenerate.engine import SamplingSpec, generate_all
from dflash_trainer.data.regenerate.hf_engine import TransformersEngine
from dflash_trainer.data.target import context_length
from dflash_trainer.tiny.build import build_tiny_target
from dflash_trainer.tiny.prompts import tokenized_prompts

# The slot model: a 14K-prompt shard, the runner's 2,000-prompt chunks.
SHARD_PROMPTS = 14_000
CHUNK_PROMPTS = 2_000
# vLLM 0.33's max_num_seqs on a B200 (an H100 gets 256 or 1024 by memory; the ratio moves little).
SLOTS = 1024
# Thinking-trace lengths: lognormal with median 4,000 tokens and sigma 0.8 (Qwen3 thinking traces
# on reasoning prompts: half exceed 4,096 tokens, ~10% exceed 11,000, ~1% exceed 25,000), then
# capped at max_tokens. This fit gives the 1.24x / 1.84x; docs/benchmarks.md shows how the
# ratio moves with the median and sigma.
MEDIAN_TOKENS = 4000.0
SIGMA = 0.8


def slot_makespan(lengths: np.ndarray, slots: int) -> int:
    """Decode steps for `slots` slots to finish every request, each taking the next free slot."""
    free = [0] * min(slots, len(lengths))
    heapq.heapify(free)
    for length in lengths.tolist():
        heapq.heapreplace(free, free[0] + int(length))
    return max(free)


def simulate(lengths: np.ndarray, slots: int, chunk: int) -> tuple[int, int]:
    """(chunked decode steps, streamed decode steps) of one shard."""
    chunked = sum(
        slot_makespan(lengths[start : start + chunk], slots)
        for start in range(0, len(lengths), chunk)
    )
    return chunked, slot_makespan(lengths, slots)


def sample_lengths(n: int, cap: int, median: float, sigma: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(math.log(median), sigma, n)
    return np.minimum(np.ceil(raw), cap).astype(np.int64)


def run_slot_simulation(args: argparse.Namespace) -> None:
    print(
        f"vLLM slot simulation: {args.shard_prompts} prompts, {args.slots} slots, chunks of "
        f"{args.chunk}, lengths lognormal(median {args.median:.0f}, sigma {args.sigma})"
    )
    for cap in (4096, 16384):
        ratios = []
        for seed in range(args.seeds):
            lengths = sample_lengths(args.shard_prompts, cap, args.median, args.sigma, seed)
            chunked, streamed = simulate(lengths, args.slots, args.chunk)
            ratios.append(chunked / streamed)
        low = sample_lengths(args.shard_prompts, cap, args.median, args.sigma, 0)
        chunked, streamed = simulate(low, args.slots, args.chunk)
        print(
            f"  max_tokens {cap:>5}: mean answer {low.mean():.0f} tokens, "
            f"{(low == cap).mean():.1%} cut; chunked {chunked} decode steps, "
            f"streamed {streamed}; RATIO chunked / streamed {np.mean(ratios):.2f}x "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f} over {args.seeds} seeds)"
        )


def count_forward_passes(engine: TransformersEngine, prompts: list[list[int]]) -> tuple[int, int]:
    """(forward passes, output tokens) of every prompt through the engine."""
    calls = [0]

    def hook(*_: object) -> None:
        calls[0] += 1

    handle = engine.model.register_forward_hook(hook)
    try:
        outputs = generate_all(engine, prompts)
    finally:
        handle.remove()
        engine.close()
    return calls[0], sum(len(o.token_ids) for o in outputs)


def run_cpu(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        target = build_tiny_target(Path(tmp) / "tiny")
        tokenizer = AutoTokenizer.from_pretrained(target.path)
        prompts = tokenized_prompts(tokenizer, args.prompts, seed=3)
        # Temperature 1, no top-k/top-p: the random target then ends answers at varied lengths.
        sampling = SamplingSpec(temperature=1.0, top_p=1.0, top_k=0, max_tokens=args.max_tokens)
        context = context_length(str(target.path)) or 4096
        results = {}
        for name, streaming in (("chunked (static batches)", False), ("streamed", True)):
            engine = TransformersEngine(
                str(target.path), tokenizer, sampling, target.eos_token_id, seed=0,
                context=context, batch_size=args.batch, streaming=streaming,
            )  # fmt: skip
            t0 = time.perf_counter()
            passes, tokens = count_forward_passes(engine, prompts)
            results[name] = (passes, tokens, time.perf_counter() - t0)
    print(
        f"CPU, transformers engine, tiny Qwen3 target: {args.prompts} prompts, {args.batch} "
        f"slots, max_tokens {args.max_tokens}, temperature 1, {args.threads} thread(s)"
    )
    for name, (passes, tokens, seconds) in results.items():
        print(
            f"  {name}: {passes} forward passes, {tokens} output tokens "
            f"({1000 * passes / tokens:.1f} passes per 1,000 tokens), {seconds:.1f}s"
        )
    (c_passes, c_tokens, c_s), (s_passes, s_tokens, s_s) = results.values()
    print(
        f"  RATIO chunked / streamed forward passes {c_passes / s_passes:.2f}x "
        f"(per output token {(c_passes / c_tokens) / (s_passes / s_tokens):.2f}x; "
        f"wall clock {c_s / s_s:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--shard-prompts", type=int, default=SHARD_PROMPTS)
    parser.add_argument("--slots", type=int, default=SLOTS)
    parser.add_argument("--chunk", type=int, default=CHUNK_PROMPTS)
    parser.add_argument("--median", type=float, default=MEDIAN_TOKENS)
    parser.add_argument("--sigma", type=float, default=SIGMA)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--skip-cpu", action="store_true", help="the slot simulation only")
    args = parser.parse_args()
    run_slot_simulation(args)
    if not args.skip_cpu:
        run_cpu(args)


if __name__ == "__main__":
    main()
