"""DFlash mask cost at 3072 tokens x 512 anchors x B=16: ours vs a dense boolean mask.

Builds, in one process and for the same random anchors: the dense `[N*B, S+N*B]` mask
(baseline), our chunked-SDPA plan (CPU default) and the flex-attention BlockMask (GPU
default). Prints build time and bytes of each as ratios to the dense mask, the share of
128x128 tiles flex computes, and attention forward+backward time and peak memory, chunked
vs dense, from the debug run's size up to the paper's (one fresh process per cell).

    uv run python bench/bench_trainer_mask.py [--seq 3072 --anchors 512 --block 16]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from dflash_trainer.model.block_attention import BlockLayout, block_attention, build_chunk_plan
from torch.nn.attention.flex_attention import create_block_mask

REPEATS = 3
ATTN_HEADS, ATTN_DIM = 2, 64
# (tokens, anchors, block size): the debug run's size up to the paper's.
ATTENTION_SIZES = [(64, 48, 8), (512, 64, 16), (1024, 128, 16), (3072, 512, 16)]


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


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def attention_child(backend: str, seq: int, anchors: int, block: int) -> None:
    """Forward + backward of one attention call in this fresh process: time and peak RSS."""
    layout = build_layout(seq, anchors, block)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, ATTN_HEADS, layout.num_queries, ATTN_DIM, generator=gen).requires_grad_()
    k = torch.randn(1, ATTN_HEADS, seq + layout.num_queries, ATTN_DIM, generator=gen)
    v = torch.randn_like(k)
    k.requires_grad_()
    v.requires_grad_()

    def run() -> None:
        block_attention(q, k, v, layout, backend=backend).sum().backward()  # type: ignore[arg-type, no-untyped-call]

    run()  # warm-up; also builds and caches the mask
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS counter
    before = rss_kib("VmRSS")
    seconds, _ = best_of(run)
    print(json.dumps({"seconds": seconds, "peak_mib": (rss_kib("VmHWM") - before) / 1024}))


def attention_costs(sizes: list[tuple[int, int, int]]) -> None:
    print(
        f"attention forward+backward ({ATTN_HEADS} heads x {ATTN_DIM}, float32, one sequence, "
        "fresh process per cell; time best of 3, peak RSS above the inputs):"
    )
    for seq, anchors, block in sizes:
        cells = {}
        for backend in ("dense", "sdpa"):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    backend,
                    "--seq",
                    str(seq),
                    "--anchors",
                    str(anchors),
                    "--block",
                    str(block),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            cells[backend] = json.loads(out.stdout.strip().splitlines()[-1])
        dense, chunked = cells["dense"], cells["sdpa"]
        pairs = anchors * block * (seq + anchors * block)
        print(
            f"  S={seq:5d} {anchors:3d} anchors x B={block:2d} ({pairs / 1e6:6.2f}M pairs): "
            f"dense {dense['seconds'] * 1e3:8.1f} ms +{dense['peak_mib']:7.1f} MiB | chunked "
            f"{chunked['seconds'] * 1e3:8.1f} ms +{chunked['peak_mib']:7.1f} MiB | RATIO time "
            f"dense/chunked {dense['seconds'] / chunked['seconds']:.2f}x, memory "
            f"{dense['peak_mib'] / max(chunked['peak_mib'], 0.1):.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=3072)
    parser.add_argument("--anchors", type=int, default=512)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--child", choices=["dense", "sdpa"], default=None)
    args = parser.parse_args()
    if args.child:
        attention_child(args.child, args.seq, args.anchors, args.block)
        return
    with torch.no_grad():
        mask_costs(args.seq, args.anchors, args.block)
    attention_costs(ATTENTION_SIZES)


if __name__ == "__main__":
    main()
