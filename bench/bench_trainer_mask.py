"""DFlash mask cost at 3072 tokens x 512 anchors x B=16: ours vs a dense boolean mask.

Builds, in one process and for the same random anchors: the dense `[N*B, S+N*B]` mask
(baseline), our chunked-SDPA plan (CPU default) and the flex-attention BlockMask (GPU
default). Prints build time and bytes of each as ratios to the dense mask, the share of
128x128 tiles flex computes, and, at a smaller size, attention forward time chunked vs dense.

    uv run python bench/bench_trainer_mask.py [--seq 3072 --anchors 512 --block 16]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import torch
from dflash_trainer.model.block_attention import BlockLayout, block_attention, build_chunk_plan
from torch.nn.attention.flex_attention import create_block_mask

REPEATS = 3


def best_of(fn: Callable[[], Any]) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def build_layout(seq: int, anchors: int, block: int, seed: int = 0) -> BlockLayout:
    gen = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(seq - block, generator=gen)[:anchors].sort().values
    return BlockLayout(chosen[None], context_len=seq, block_size=block)


def mask_costs(seq: int, anchors: int, block: int) -> None:
    dense_s, dense = best_of(lambda: build_layout(seq, anchors, block).dense_mask(None))
    dense_bytes = dense.numel() * dense.element_size()

    def chunks() -> list[Any]:
        return build_chunk_plan(build_layout(seq, anchors, block), None, 256)

    chunk_s, plan = best_of(chunks)
    chunk_bytes = sum(mask.numel() * mask.element_size() for *_, mask in plan)
    peak_chunk = max(mask.numel() * mask.element_size() for *_, mask in plan)

    layout = build_layout(seq, anchors, block)

    def mask_mod(
        b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        return layout.visible(b, q, kv, None)

    def flex() -> Any:
        return create_block_mask(
            mask_mod,
            B=1,
            H=None,
            Q_LEN=layout.num_queries,
            KV_LEN=seq + layout.num_queries,
            device="cpu",
        )

    flex_s, block_mask = best_of(flex)
    flex_bytes = sum(
        t.numel() * t.element_size() for t in block_mask.as_tuple() if isinstance(t, torch.Tensor)
    )
    tiles = block_mask.to_dense()[0, 0]
    print(
        f"mask for S={seq}, {anchors} anchors x B={block}: {layout.num_queries} queries x "
        f"{seq + layout.num_queries} keys"
    )
    print(f"  dense bool mask (baseline): {dense_s * 1e3:8.1f} ms {dense_bytes / 2**20:8.1f} MiB")
    print(
        f"  chunked SDPA plan (CPU):    {chunk_s * 1e3:8.1f} ms {chunk_bytes / 2**20:8.1f} MiB "
        f"in all, {peak_chunk / 2**20:.1f} MiB per chunk"
    )
    print(
        f"  flex BlockMask (GPU):       {flex_s * 1e3:8.1f} ms {flex_bytes / 2**20:8.3f} MiB, "
        f"{float(tiles.float().mean()):.1%} of 128x128 tiles computed"
    )
    print(
        f"RATIO memory dense / chunked-total: {dense_bytes / chunk_bytes:.2f}x, "
        f"dense / chunked-peak: {dense_bytes / peak_chunk:.1f}x, "
        f"dense / flex: {dense_bytes / flex_bytes:.0f}x"
    )
    print(
        f"RATIO build time dense / chunked: {dense_s / chunk_s:.2f}x, dense / flex: "
        f"{dense_s / flex_s:.2f}x"
    )


def attention_costs(seq: int, anchors: int, block: int, heads: int, dim: int) -> None:
    layout = build_layout(seq, anchors, block)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, heads, layout.num_queries, dim, generator=gen)
    k = torch.randn(1, heads, seq + layout.num_queries, dim, generator=gen)
    v = torch.randn_like(k)
    dense_s, dense = best_of(lambda: block_attention(q, k, v, layout, backend="dense"))
    chunk_s, chunked = best_of(lambda: block_attention(q, k, v, layout, backend="sdpa"))
    torch.testing.assert_close(chunked, dense, atol=1e-4, rtol=1e-4)
    print(
        f"attention forward, S={seq}, {anchors} anchors x B={block}, {heads} heads x {dim}: "
        f"dense {dense_s * 1e3:.1f} ms, chunked {chunk_s * 1e3:.1f} ms (same output)"
    )
    print(f"RATIO attention time dense / chunked: {dense_s / chunk_s:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=3072)
    parser.add_argument("--anchors", type=int, default=512)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--attn-seq", type=int, default=1024)
    parser.add_argument("--attn-anchors", type=int, default=128)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    mask_costs(args.seq, args.anchors, args.block)
    attention_costs(args.attn_seq, args.attn_anchors, args.block, heads=4, dim=64)


if __name__ == "__main__":
    main()
