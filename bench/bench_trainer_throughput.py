"""Training throughput of `configs/debug.yaml` on CPU, and where a step's time goes.

Runs the real training step (target taps -> anchors -> drafter -> loss -> AdamW) and, in
the same process on the same batches, the target forward alone (the baseline: training
can never be faster than extracting the features). Prints tokens/s of both, their ratio,
and the share of step time in the target forward vs the drafter (forward + backward).

    uv run python bench/bench_trainer_throughput.py [--steps 40] [--warmup 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from dflash_trainer.train.batches import rank_micro_batches
from dflash_trainer.train.config import load_train_config
from dflash_trainer.train.distributed import init_distributed
from dflash_trainer.train.step import build_micro_batch, run_train_step
from dflash_trainer.train.trainer import Trainer

DEBUG_CONFIG = Path(__file__).resolve().parents[1] / "trainer" / "configs" / "debug.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--config", type=Path, default=DEBUG_CONFIG)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_train_config(args.config, ["checkpoint.resume=false"], run_root=tmp)
        env = init_distributed(5)
        trainer = Trainer(cfg, env)
        batches = []
        for _ in range(args.warmup + args.steps):
            epoch, rows = trainer.cursor.next_global_batch()
            idx = rank_micro_batches(
                rows,
                batch_size=cfg.data.batch_size,
                world_size=1,
                rank=0,
                grad_accum=cfg.optim.grad_accum,
            )
            batches.append(
                [
                    build_micro_batch(trainer.rows, i, epoch, trainer.settings, env.device)
                    for i in idx
                ]
            )
        step_times, target_share, tokens = [], [], 0
        for n, micro in enumerate(batches):
            start = time.perf_counter()
            out = run_train_step(
                model=trainer.model,
                target=trainer.target,
                taps=trainer.taps,
                micro_batches=micro,
                optimizer=trainer.optimizer,
                scheduler=trainer.scheduler,
                settings=trainer.settings,
                grad_clip=cfg.optim.grad_clip,
                env=env,
            )
            if n >= args.warmup:
                step_times.append(time.perf_counter() - start)
                target_share.append(out.target_seconds / (out.target_seconds + out.drafter_seconds))
                tokens += out.tokens
        forward_times = []
        with torch.no_grad():
            for micro in batches[args.warmup :]:
                start = time.perf_counter()
                for mb in micro:
                    trainer.taps.features(mb.input_ids)
                forward_times.append(time.perf_counter() - start)
    train_tps = tokens / sum(step_times)
    forward_tps = tokens / sum(forward_times)
    print(
        f"config {args.config.name}: batch {cfg.data.batch_size} x <= {cfg.data.max_seq_len} "
        f"tokens, drafter {trainer.drafter_cfg.num_hidden_layers} layers, B="
        f"{trainer.drafter_cfg.block_size}, {args.steps} steps after {args.warmup} warmup, "
        f"{torch.get_num_threads()} CPU threads"
    )
    print(
        f"training:             {train_tps:10,.0f} tokens/s "
        f"(median step {statistics.median(step_times) * 1e3:.1f} ms)"
    )
    print(f"target forward alone: {forward_tps:10,.0f} tokens/s (baseline)")
    print(
        f"step time share: target forward {statistics.mean(target_share):.0%}, drafter "
        f"forward+backward+optimizer {1 - statistics.mean(target_share):.0%}"
    )
    print(f"RATIO training / target-forward-only throughput: {train_tps / forward_tps:.2f}x")


if __name__ == "__main__":
    main()
