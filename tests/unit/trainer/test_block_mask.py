"""The block-sparse DFlash mask: who sees what, and the kernels that apply it agree."""

from __future__ import annotations

import pytest
import torch
from dflash_trainer.model.block_attention import BlockLayout, block_attention
from torch.nn.attention.flex_attention import create_block_mask


def layout_of(anchors: list[list[int]], context_len: int, block_size: int) -> BlockLayout:
    return BlockLayout(torch.tensor(anchors), context_len, block_size)


def visible_matrix(layout: BlockLayout, window: int | None = None) -> torch.Tensor:
    return layout.dense_mask(window)[0, 0]


def test_anchors_closer_than_the_block_size_never_see_each_others_blocks() -> None:
    layout = layout_of([[5, 6, 7]], context_len=20, block_size=4)
    mask = visible_matrix(layout)
    s, b = 20, 4
    for n in range(3):
        for m in range(3):
            seen = mask[n * b : (n + 1) * b, s + m * b : s + (m + 1) * b]
            assert bool(seen.all()) if n == m else not bool(seen.any()), (n, m)


def test_context_is_strictly_before_the_anchor_for_every_slot() -> None:
    layout = layout_of([[3, 9]], context_len=16, block_size=4)
    mask = visible_matrix(layout)
    for n, anchor in enumerate([3, 9]):
        rows = mask[n * 4 : (n + 1) * 4, :16]
        assert rows[:, :anchor].all()
        assert not rows[:, anchor:].any(), f"block at {anchor} sees its anchor or later"


def test_a_block_is_bidirectional_inside_itself() -> None:
    mask = visible_matrix(layout_of([[2]], context_len=8, block_size=4))
    assert mask[0, 8 + 3] and mask[3, 8 + 0]


def test_slot_positions_are_anchor_plus_offset() -> None:
    layout = layout_of([[2, 10], [0, 5]], context_len=16, block_size=4)
    assert layout.query_positions().tolist() == [
        [2, 3, 4, 5, 10, 11, 12, 13],
        [0, 1, 2, 3, 5, 6, 7, 8],
    ]


def test_sliding_window_limits_context_by_query_position() -> None:
    window = 5
    mask = visible_matrix(layout_of([[10]], context_len=16, block_size=4), window)
    for k in range(4):
        position = 10 + k
        seen = mask[k, :16].nonzero().flatten().tolist()
        assert seen == [j for j in range(10) if position - j < window], k


def test_padding_anchor_zero_sees_only_its_own_block() -> None:
    mask = visible_matrix(layout_of([[0]], context_len=8, block_size=4))
    assert not mask[:, :8].any()
    assert mask[:, 8:].all()


@pytest.mark.parametrize("window", [None, 6])
@pytest.mark.parametrize("chunk_queries", [4, 8, 64])
def test_chunked_sdpa_equals_the_dense_reference(window: int | None, chunk_queries: int) -> None:
    torch.manual_seed(0)
    anchors = torch.stack([torch.randperm(30)[:7].sort().values for _ in range(2)])
    layout = BlockLayout(anchors, context_len=32, block_size=4)
    q = torch.randn(2, 4, layout.num_queries, 8)
    k = torch.randn(2, 2, 32 + layout.num_queries, 8)  # grouped-query: 2 kv heads
    v = torch.randn_like(k)
    dense = block_attention(q, k, v, layout, backend="dense", window=window)
    chunked = block_attention(
        q, k, v, layout, backend="sdpa", window=window, chunk_queries=chunk_queries
    )
    torch.testing.assert_close(chunked, dense, atol=1e-5, rtol=1e-5)


def test_flex_block_mask_keeps_exactly_the_tiles_the_dense_mask_needs() -> None:
    torch.manual_seed(1)
    anchors = torch.randperm(250)[:24].sort().values[None]
    layout = BlockLayout(anchors, context_len=256, block_size=8)
    kv_len = 256 + layout.num_queries

    def mask_mod(
        b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        return layout.visible(b, q, kv, None)

    block_mask = create_block_mask(
        mask_mod, B=1, H=None, Q_LEN=layout.num_queries, KV_LEN=kv_len, device="cpu"
    )
    tiles = block_mask.to_dense()[0, 0].bool()  # [q tiles, kv tiles]: tile has a visible pair
    dense = visible_matrix(layout)
    size = block_mask.BLOCK_SIZE[0]
    for qt in range(tiles.shape[0]):
        for kt in range(tiles.shape[1]):
            expected = bool(dense[qt * size : (qt + 1) * size, kt * size : (kt + 1) * size].any())
            assert bool(tiles[qt, kt]) == expected, (qt, kt)
