"""One GPU: step time, memory and MFU of online DFlash training with a Qwen3-8B-shaped target.

Random weights (nothing downloaded): a bf16 Qwen3-8B-shaped target (36 layers, hidden 4096,
vocab 151,936) and the paper's drafter (5 layers, B=16, taps [1,9,17,25,33]), batch 4 x 3072
tokens, 512 anchors per sequence, bf16 autocast, flex attention, fused AdamW. Runs the
real training step; the baseline measured in the same run is the target forward alone.
MFU counts matmul + attention FLOPs analytically (see `count_step_flops`) against the
GPU's dense bf16 peak. `--tiny` runs the same script on CPU with toy shapes (it is tested).

    uv run python bench/bench_trainer_gpu.py               # on a GPU machine
    uv run python bench/bench_trainer_gpu.py --tiny        # anywhere, seconds
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
from dflash_trainer.model.config import DrafterConfig, build_drafter_config
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts, find_parts, freeze
from dflash_trainer.train.batches import build_rows
from dflash_trainer.train.distributed import DistEnv
from dflash_trainer.train.step import (
    MicroBatch,
    ObjectiveSettings,
    build_micro_batch,
    run_train_step,
)
from transformers import AutoConfig, AutoModelForCausalLM

QWEN3_8B: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rope_theta": 1_000_000.0,
    "max_position_embeddings": 40960,
}
TINY: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
# Dense bf16 tensor-core peaks (TFLOP/s) from the vendors' datasheets.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "B200": 2250.0, "A100": 312.0, "RTX PRO 6000": 503.8}
PROMPT_TOKENS = 256  # unsupervised prefix of every synthetic sample


@dataclass(frozen=True)
class Shape:
    batch: int
    seq: int
    anchors: int
    block: int
    layers: int


def build_target(config: dict[str, Any], device: torch.device, dtype: torch.dtype) -> TargetParts:
    hf_config = AutoConfig.for_model("qwen3", **config)
    with torch.device(device):  # initialise in place: an 8B CPU init would take minutes
        model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype)  # type: ignore[no-untyped-call]
    return find_parts(freeze(model))


def build_batch(
    shape: Shape, vocab: int, settings: ObjectiveSettings, device: torch.device
) -> MicroBatch:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab - 1, (shape.batch, shape.seq), generator=gen)
    mask = torch.zeros_like(ids, dtype=torch.int8)
    mask[:, min(PROMPT_TOKENS, shape.seq // 4) :] = 1
    rows = build_rows(ids, mask, prefix="bench")
    return build_micro_batch(rows, np.arange(shape.batch), 0, settings, device)


def count_params(modules: Any) -> int:
    return sum(p.numel() for m in modules for p in m.parameters())


def count_step_flops(
    target: TargetParts, drafter: DrafterConfig, draft_model: DFlashDrafter, mb: MicroBatch
) -> tuple[float, float]:
    """(target forward FLOPs, drafter forward+backward FLOPs incl. LM head) for one batch.

    Matmuls: 2 FLOPs per parameter per token (x3 for forward+backward). Attention:
    4 * queries * visible keys * head_dim * heads (x3 with backward). The target runs up to
    its last tap; the LM head runs forward, recompute and input-gradient (3 x 2 V H).
    """
    tokens = int(mb.seq_lens.sum())
    seq = mb.input_ids.shape[1]
    last = max(drafter.target_layer_ids) + 1
    t_cfg = target.config
    target_flops = 2.0 * count_params(target.layers[:last]) * tokens
    target_flops += (
        last
        * 4.0
        * mb.input_ids.shape[0]
        * seq
        * seq
        / 2
        * t_cfg.num_attention_heads
        * t_cfg.head_dim
    )
    queries = mb.draft.block_ids.numel()
    layer_params = count_params(draft_model.layers)
    kv_params = sum(
        p.numel()
        for name, p in draft_model.layers.named_parameters()
        if name.endswith(("k_proj.weight", "v_proj.weight"))
    )
    context = mb.input_ids.numel()
    mean_visible = float(mb.draft.layout.anchors.float().mean()) + drafter.block_size
    attention = 4.0 * queries * mean_visible * drafter.head_dim * drafter.num_attention_heads
    forward = (
        2.0 * layer_params * queries
        + 2.0 * kv_params * context
        + 2.0 * draft_model.fc.weight.numel() * context
        + attention * drafter.num_hidden_layers
    )
    scored = int((mb.draft.weights > 0).sum())
    lm_head = 3 * 2.0 * drafter.vocab_size * drafter.hidden_size * scored
    return target_flops, 3 * forward + lm_head


def peak_tflops(device: torch.device, override: float | None) -> float:
    if override:
        return override
    if device.type != "cuda":
        return 1.0  # nominal: the --tiny CPU run only checks the script, not a figure
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_TFLOPS.items():
        if key in name:
            return value
    raise SystemExit(f"unknown GPU {name!r}: pass --peak-tflops (dense bf16 TFLOP/s)")


def timed(fn: Any, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="toy shapes on CPU")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--seq", type=int, default=None)
    parser.add_argument("--peak-tflops", type=float, default=None)
    args = parser.parse_args()
    if args.tiny:
        device, dtype, config = torch.device("cpu"), torch.float32, TINY
        shape = Shape(args.batch or 2, args.seq or 128, 32, 8, 2)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no GPU here: run with --tiny, or on a GPU machine")
        device, dtype, config = torch.device("cuda", 0), torch.bfloat16, QWEN3_8B
        shape = Shape(args.batch or 4, args.seq or 3072, 512, 16, 5)
    torch.manual_seed(0)
    target = build_target(config, device, dtype)
    drafter_cfg = build_drafter_config(
        target.config,
        num_layers=shape.layers,
        block_size=shape.block,
        mask_token_id=config["vocab_size"] - 1,
    )
    drafter = DFlashDrafter(drafter_cfg).to(device)
    optimizer = torch.optim.AdamW(
        drafter.parameters(), lr=6e-4, fused=device.type == "cuda" or None
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    taps = TargetTaps(target, drafter_cfg.target_layer_ids)
    settings = ObjectiveSettings(
        block_size=shape.block,
        mask_token_id=drafter_cfg.mask_token_id,
        gamma=7.0,
        anchors_per_sequence=shape.anchors,
        max_seq_len=shape.seq,
        loss_chunk_tokens=8192,
        backend="auto",
        chunk_queries=256,
        seed=0,
    )
    batch = build_batch(shape, config["vocab_size"], settings, device)
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    def step() -> Any:
        return run_train_step(
            model=drafter,
            target=target,
            taps=taps,
            micro_batches=[batch],
            optimizer=optimizer,
            scheduler=scheduler,
            settings=settings,
            grad_clip=1.0,
            env=env,
        )

    for _ in range(args.warmup):
        step()
    step_times, target_times = [], []
    for _ in range(args.steps):
        step_times.append(timed(step, device))
    for _ in range(args.steps):
        target_times.append(timed(lambda: taps.features(batch.input_ids), device))
    step_s, target_s = statistics.median(step_times), statistics.median(target_times)
    target_flops, drafter_flops = count_step_flops(target, drafter_cfg, drafter, batch)
    peak = peak_tflops(device, args.peak_tflops)
    mfu = (target_flops + drafter_flops) / step_s / (peak * 1e12)
    memory = (
        torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
    )
    tokens = int(batch.seq_lens.sum())
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (--tiny)"
    print(
        f"{name}: target {config['num_hidden_layers']} layers hidden {config['hidden_size']} "
        f"{dtype}, drafter {shape.layers} layers B={shape.block}, batch {shape.batch} x "
        f"{shape.seq}, {batch.draft.num_anchors} anchors, median of {args.steps} steps"
    )
    print(
        f"  train step {step_s * 1e3:.1f} ms ({tokens / step_s:,.0f} tokens/s), target "
        f"forward alone {target_s * 1e3:.1f} ms (baseline), peak memory {memory:.1f} GiB"
    )
    print(
        f"  FLOPs/step: target {target_flops / 1e12:.2f} T, drafter fwd+bwd "
        f"{drafter_flops / 1e12:.2f} T; MFU {mfu:.1%} of {peak:.0f} TFLOP/s"
    )
    print(f"RATIO train step / target forward: {step_s / target_s:.2f}x")


if __name__ == "__main__":
    main()
