"""Acceptance length of a trained vs an untrained drafter on the tiny calibration target.

Trains `configs/debug.yaml` (6-layer hidden-64 vocab-512 random Qwen3, 2-layer drafter,
B=8) on the target's own greedy continuations, then runs greedy speculative decoding on
held-out random prompts with the trained drafter and with an untrained one (same shapes).
Prints both and their ratio; also checks the speculative output equals greedy decoding.

    uv run python bench/bench_trainer_acceptance.py [--steps 256] [--prompts 16]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from dflash_trainer.eval.greedy import build_random_prompts, greedy_generate
from dflash_trainer.eval.speculative import AcceptanceStats, speculative_generate
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.export import load_exported_drafter
from dflash_trainer.train.config import load_train_config
from dflash_trainer.train.distributed import init_distributed
from dflash_trainer.train.trainer import Trainer

DEBUG_CONFIG = Path(__file__).resolve().parents[1] / "trainer" / "configs" / "debug.yaml"
# Held-out prompts use a seed the self-distillation data (seed 0) never used.
PROMPT_SEED = 1


def measure(
    trainer: Trainer, drafter: DFlashDrafter, prompts: torch.Tensor, new_tokens: int
) -> tuple[AcceptanceStats, int]:
    stats = AcceptanceStats(drafter.config.block_size)
    matches = 0
    for prompt in prompts:
        out = speculative_generate(
            trainer.target, trainer.taps, drafter.eval(), prompt.tolist(), new_tokens
        )
        ref = greedy_generate(trainer.target.model, prompt[None], new_tokens)[0, len(prompt) :]
        matches += out.tokens == ref.tolist()
        stats.add(out)
    return stats, matches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--set", nargs="*", default=[], help="extra train.yaml overrides")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_train_config(
            DEBUG_CONFIG,
            [
                f"optim.max_steps={args.steps}",
                "checkpoint.resume=false",
                f"checkpoint.every_steps={args.steps}",
                *args.set,
            ],
            run_root=tmp,
        )
        trainer = Trainer(cfg, init_distributed(5))
        started = time.perf_counter()
        trainer.run()
        train_seconds = time.perf_counter() - started
        trained = load_exported_drafter(cfg.export_uri)
    untrained = DFlashDrafter(trained.config)
    prompts = build_random_prompts(
        args.prompts, 16, 512, PROMPT_SEED, avoid=trained.config.mask_token_id
    )
    tr, tr_match = measure(trainer, trained, prompts, args.new_tokens)
    un, un_match = measure(trainer, untrained, prompts, args.new_tokens)
    print(
        f"config: {DEBUG_CONFIG.name}, {args.steps} steps ({train_seconds:.0f} s), "
        f"{args.prompts} held-out prompts x {args.new_tokens} new tokens, greedy"
    )
    print(f"untrained drafter: mean acceptance length {un.acceptance_length:.3f} (pooled)")
    print(f"trained drafter:   mean acceptance length {tr.acceptance_length:.3f} (pooled)")
    print(f"per-position acceptance (trained): {[round(p, 3) for p in tr.per_position]}")
    print(
        f"RATIO trained / untrained acceptance length: "
        f"{tr.acceptance_length / un.acceptance_length:.2f}x"
    )
    print(
        f"speculative == greedy: trained {tr_match}/{args.prompts}, "
        f"untrained {un_match}/{args.prompts}"
    )


if __name__ == "__main__":
    main()
