"""DFlash vs DFlash2 on the same tiny target, data, steps and seeds: acceptance length (greedy
and sampled), training step time and memory. DFlash is the baseline; every ratio is DFlash2 /
DFlash measured in the same run.

Trains `configs/debug.yaml` (6-layer hidden-64 vocab-512 random Qwen3, 2-layer drafter, B=8)
once per architecture and seed (the seed drives the drafter's init and the anchors; the
target and its self-distilled data are the same), exports, reloads, and runs the builtin
speculative decoding on held-out random prompts: greedy and at T = 0.6 (rejection sampling;
DFlash2 proposes with the selector's walk). Memory: the CUDA peak on a GPU; on CPU the
trainable state (weights, gradients, AdamW moments: 16 B per parameter).

    uv run python bench/bench_drafter_architectures.py [--steps 128] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from dflash_trainer.eval.greedy import build_random_prompts
from dflash_trainer.eval.speculative import AcceptanceStats, speculative_generate
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.export import load_exported_drafter
from dflash_trainer.train.config import load_train_config
from dflash_trainer.train.distributed import init_distributed
from dflash_trainer.train.trainer import Trainer

DEBUG_CONFIG = Path(__file__).resolve().parents[1] / "trainer" / "configs" / "debug.yaml"
# Held-out prompts use a seed the self-distillation data (seed 0) never used.
PROMPT_SEED = 1
SAMPLED_TEMPERATURE = 0.6
# AdamW training state per float32 parameter: weight, gradient, two moments.
STATE_BYTES_PER_PARAM = 16
ARCHITECTURES = {
    "dflash": [],
    # Rank and top-K scaled to the 512-token vocabulary (speculators' 256 / 16 are for 150K+).
    "dflash2": ["drafter.dflash2={selector_rank: 32, selector_top_k: 8}"],
}


@dataclass(frozen=True)
class Run:
    greedy: float
    sampled: float
    step_seconds: float
    memory_mib: float


def accept(trainer: Trainer, drafter: DFlashDrafter, prompts: torch.Tensor, new_tokens: int,
           temperature: float, seed: int) -> float:  # fmt: skip
    stats = AcceptanceStats(drafter.config.block_size)
    generator = torch.Generator().manual_seed(seed)
    for prompt in prompts:
        stats.add(
            speculative_generate(
                trainer.target, trainer.taps, drafter.eval(), prompt.tolist(), new_tokens,
                temperature=temperature, generator=generator,
            )
        )  # fmt: skip
    return stats.acceptance_length


def train_and_measure(architecture: str, seed: int, args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_train_config(
            DEBUG_CONFIG,
            [
                f"optim.max_steps={args.steps}", "checkpoint.resume=false",
                f"checkpoint.every_steps={args.steps}", f"seed={seed}",
                f"drafter.init_seed={seed}", f"data.self_distill.samples={args.samples}",
                *ARCHITECTURES[architecture],
            ],
            run_root=tmp,
        )  # fmt: skip
        trainer = Trainer(cfg, init_distributed(5))
        cuda = trainer.env.device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        trainer.run()
        step_seconds = (time.perf_counter() - started) / args.steps
        params = sum(p.numel() for p in trainer.model.parameters())
        memory = (
            torch.cuda.max_memory_allocated() if cuda else params * STATE_BYTES_PER_PARAM
        ) / 2**20
        drafter = load_exported_drafter(cfg.export_uri, trainer.env.device)
    prompts = build_random_prompts(
        args.prompts, 16, 512, PROMPT_SEED, avoid=drafter.config.mask_token_id
    )
    return Run(
        greedy=accept(trainer, drafter, prompts, args.new_tokens, 0.0, seed),
        sampled=accept(trainer, drafter, prompts, args.new_tokens, SAMPLED_TEMPERATURE, seed),
        step_seconds=step_seconds,
        memory_mib=memory,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--samples", type=int, default=512, help="self-distilled rows")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    runs = {arch: [train_and_measure(arch, s, args) for s in args.seeds] for arch in ARCHITECTURES}
    print(
        f"config: {DEBUG_CONFIG.name}, {args.steps} steps, {args.samples} samples, "
        f"seeds {args.seeds}, "
        f"{args.prompts} held-out prompts x {args.new_tokens} new tokens"
    )
    print("| architecture | acceptance greedy | acceptance T=0.6 | step time (s) | memory (MiB) |")
    print("|---|---|---|---|---|")
    means: dict[str, list[float]] = {}
    for arch, measured in runs.items():
        columns = [
            [r.greedy for r in measured], [r.sampled for r in measured],
            [r.step_seconds for r in measured], [r.memory_mib for r in measured],
        ]  # fmt: skip
        means[arch] = [statistics.mean(c) for c in columns]
        cells = [
            f"{statistics.mean(c):.3f} ± {statistics.stdev(c) if len(c) > 1 else 0.0:.3f}"
            for c in columns
        ]
        print(f"| {arch} | " + " | ".join(cells) + " |")
    names = ["acceptance greedy", "acceptance T=0.6", "step time", "memory"]
    for name, new, base in zip(names, means["dflash2"], means["dflash"], strict=True):
        print(f"RATIO dflash2 / dflash {name}: {new / base:.3f}x")


if __name__ == "__main__":
    main()
