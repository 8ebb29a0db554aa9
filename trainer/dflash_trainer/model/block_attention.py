"""The DFlash block-sparse attention: one visibility rule and three kernels that apply it.

Queries are all draft blocks concatenated (`N*B` slots); keys/values are
`[context (S) | blocks (N*B)]`. A slot of block n sees context positions strictly before
its anchor (and inside the sliding window, if any), every slot of its own block, and
nothing of other blocks. `is_visible` is the single source of truth; the kernels are:

- `dense`: one `[N*B, S+N*B]` boolean mask and SDPA (the reference, and the baseline
  the benchmark compares against);
- `sdpa`: blocks in chunks of ~`chunk_queries` slots; each chunk attends to the context
  prefix it can see plus its own blocks (exact; memory O(chunk), default on CPU);
- `flex`: `flex_attention` with a `BlockMask` that skips empty 128x128 tiles (GPU), with the
  kernel options of `flex_options.py` for this GPU and head width.
Anchors must be sorted ascending within each row for the chunked kernel to save work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch.nn import functional

from dflash_trainer.model.flex_options import (
    build_flex_kernel_options,
    matching_rules,
    torch_release,
)

log = logging.getLogger(__name__)

Backend = Literal["auto", "dense", "sdpa", "flex"]
BACKENDS: tuple[str, ...] = ("auto", "dense", "sdpa", "flex")
# `auto` on CPU: dense up to ~1M (query, key) pairs per sequence, where both kernels tie
# (fwd+bwd 1.9 vs 1.9 ms at 0.17M pairs); chunked above (1.4x faster at 1.6M pairs, 3x
# faster with 3.9x less memory at 92M pairs: bench/bench_trainer_mask.py).
DENSE_PAIRS_LIMIT = 1 << 20
# ~256 query slots per chunk: a few dozen SDPA calls per layer at 512 anchors x B=16, while
# the wasted (masked) share of each chunk's key range stays small.
DEFAULT_CHUNK_QUERIES = 256


def is_visible(
    anchors: torch.Tensor,
    b: torch.Tensor,
    q_idx: torch.Tensor,
    kv_idx: torch.Tensor,
    *,
    context_len: int,
    block_size: int,
    window: int | None,
) -> torch.Tensor:
    """May query slot `q_idx` of batch row `b` attend to key `kv_idx`? (broadcasting; flex-safe)

    Slot q belongs to block `q // B` at position `anchor + q % B`; key j < S is context
    position j; key j >= S is slot `j - S` of the concatenated blocks.
    """
    q_block = q_idx // block_size
    anchor = anchors[b, q_block]
    in_context = kv_idx < context_len
    context_ok = in_context & (kv_idx < anchor)
    if window is not None:
        query_position = anchor + q_idx % block_size
        context_ok = context_ok & (query_position - kv_idx < window)
    same_block = ~in_context & ((kv_idx - context_len) // block_size == q_block)
    return context_ok | same_block


@dataclass
class BlockLayout:
    """Where the draft blocks of one batch sit: `anchors[b, n]` is the position of slot 0."""

    anchors: torch.Tensor
    context_len: int
    block_size: int
    _masks: dict[tuple[str, int | None], Any] = field(default_factory=dict, repr=False)

    @property
    def num_blocks(self) -> int:
        return int(self.anchors.shape[1])

    @property
    def num_queries(self) -> int:
        return self.num_blocks * self.block_size

    def query_positions(self) -> torch.Tensor:
        """`[batch, N*B]`: slot k of block n sits at `anchors[n] + k`."""
        offsets = torch.arange(self.block_size, device=self.anchors.device)
        return (self.anchors[:, :, None] + offsets).reshape(self.anchors.shape[0], -1)

    def visible(
        self, b: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor, window: int | None
    ) -> torch.Tensor:
        return is_visible(
            self.anchors,
            b,
            q_idx,
            kv_idx,
            context_len=self.context_len,
            block_size=self.block_size,
            window=window,
        )

    def dense_mask(self, window: int | None) -> torch.Tensor:
        """`[batch, 1, N*B, S+N*B]` boolean mask (cached per window)."""
        key = ("dense", window)
        if key not in self._masks:
            device = self.anchors.device
            b = torch.arange(self.anchors.shape[0], device=device)[:, None, None]
            q = torch.arange(self.num_queries, device=device)[None, :, None]
            kv = torch.arange(self.context_len + self.num_queries, device=device)[None, None, :]
            self._masks[key] = self.visible(b, q, kv, window)[:, None]
        return self._masks[key]  # type: ignore[no-any-return]


def block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BlockLayout,
    *,
    backend: Backend,
    window: int | None = None,
    scale: float | None = None,
    chunk_queries: int = DEFAULT_CHUNK_QUERIES,
) -> torch.Tensor:
    """Attention of `q [b, h, N*B, d]` over `k, v [b, h_kv, S+N*B, d]` under the block rule.

    `auto`: flex on GPU; on CPU dense for small problems, chunked SDPA for large ones.
    """
    # Under autocast, norms may hand back float32 while projections give bf16: unify.
    q, k = q.to(v.dtype), k.to(v.dtype)
    if backend == "auto":
        backend = resolve_backend(q.device, layout.num_queries * k.shape[2])
    if backend == "dense":
        return _sdpa(q, k, v, layout.dense_mask(window), scale)
    if backend == "sdpa":
        return _chunked(q, k, v, layout, window, scale, chunk_queries)
    if backend == "flex":
        return _flex(q, k, v, layout, window, scale)
    raise ValueError(f"attention backend {backend!r} is unknown; accepted: {', '.join(BACKENDS)}")


def resolve_backend(device: torch.device, pairs: int) -> Backend:
    if device.type == "cuda":
        return "flex"
    return "dense" if pairs <= DENSE_PAIRS_LIMIT else "sdpa"


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float | None
) -> torch.Tensor:
    return functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )


def build_chunk_plan(
    layout: BlockLayout, window: int | None, chunk_queries: int
) -> list[tuple[int, int, int, int, torch.Tensor]]:
    """Per chunk: (first slot, end slot, context start, context end, mask); cached per window."""
    key = ("chunks", window)
    if key in layout._masks:
        return layout._masks[key]  # type: ignore[no-any-return]
    bsz, size = layout.anchors.shape[0], layout.block_size
    blocks_per_chunk = max(1, chunk_queries // size)
    device = layout.anchors.device
    b = torch.arange(bsz, device=device)[:, None, None]
    plan = []
    for first in range(0, layout.num_blocks, blocks_per_chunk):
        last = min(first + blocks_per_chunk, layout.num_blocks)
        chunk = layout.anchors[:, first:last]
        ctx_end = min(int(chunk.max()), layout.context_len)
        ctx_start = 0
        if window is not None:
            ctx_start = max(0, min(int(chunk.min()) - window + 1, ctx_end))
        q_idx = torch.arange(first * size, last * size, device=device)
        kv_idx = torch.cat(
            [
                torch.arange(ctx_start, ctx_end, device=device),
                layout.context_len + q_idx,
            ]
        )
        mask = layout.visible(b, q_idx[None, :, None], kv_idx[None, None, :], window)[:, None]
        plan.append((first * size, last * size, ctx_start, ctx_end, mask))
    layout._masks[key] = plan
    return plan


def _chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BlockLayout,
    window: int | None,
    scale: float | None,
    chunk_queries: int,
) -> torch.Tensor:
    s = layout.context_len
    outputs = []
    for q_start, q_end, ctx_start, ctx_end, mask in build_chunk_plan(layout, window, chunk_queries):
        k_chunk = torch.cat([k[:, :, ctx_start:ctx_end], k[:, :, s + q_start : s + q_end]], dim=2)
        v_chunk = torch.cat([v[:, :, ctx_start:ctx_end], v[:, :, s + q_start : s + q_end]], dim=2)
        outputs.append(_sdpa(q[:, :, q_start:q_end], k_chunk, v_chunk, mask, scale))
    return torch.cat(outputs, dim=2)


_COMPILED_FLEX: Callable[..., torch.Tensor] | None = None


def _flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: BlockLayout,
    window: int | None,
    scale: float | None,
) -> torch.Tensor:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    global _COMPILED_FLEX
    if _COMPILED_FLEX is None:
        # Uncompiled flex_attention materialises every score; compiled, it skips empty tiles.
        _COMPILED_FLEX = torch.compile(flex_attention, dynamic=True)
    key = ("flex", window)
    if key not in layout._masks:

        def mask_mod(
            b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
        ) -> torch.Tensor:
            return layout.visible(b, q_idx, kv_idx, window)

        # Compiled mask creation never materialises the [Q, KV] grid (SpecForge #452: OOM).
        layout._masks[key] = create_block_mask(
            mask_mod,
            B=layout.anchors.shape[0],
            H=None,
            Q_LEN=layout.num_queries,
            KV_LEN=layout.context_len + layout.num_queries,
            device=q.device,
            _compile=q.device.type == "cuda",
        )
    return _COMPILED_FLEX(
        q,
        k,
        v,
        block_mask=layout._masks[key],
        scale=scale,
        enable_gqa=q.shape[1] != k.shape[1],
        kernel_options=flex_kernel_options(q.device, q.shape[-1], q.element_size()) or None,
    )


_KERNEL_OPTIONS: dict[tuple[str, int, int], dict[str, int]] = {}


def flex_kernel_options(device: torch.device, head_dim: int, element_bytes: int) -> dict[str, int]:
    """`flex_options.build_flex_kernel_options` for this device (logged once per choice)."""
    key = (str(device), head_dim, element_bytes)
    if key not in _KERNEL_OPTIONS:
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        release = torch_release(torch.__version__)
        options = build_flex_kernel_options(capability, head_dim, element_bytes, release)
        if capability is not None:
            rules = [r.name for r in matching_rules(capability, head_dim, release)]
            log.info(
                "flex attention on sm_%d%d, head width %d: kernel options %s (%s)",
                *capability, head_dim, options or "torch's defaults", ", ".join(rules) or "no rule",
            )  # fmt: skip
        _KERNEL_OPTIONS[key] = options
    return _KERNEL_OPTIONS[key]
