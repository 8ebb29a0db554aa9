"""Anchors, same-position labels and decayed weights of the DFlash objective."""

from __future__ import annotations

import math

import pytest
import torch
from dflash_trainer.train.anchors import (
    anchor_seed,
    build_anchor_candidates,
    build_draft_batch,
    build_slot_weights,
    default_gamma,
    sample_anchors,
)

MASK = 99


def test_an_anchor_needs_itself_and_the_next_token_supervised() -> None:
    mask = torch.tensor([0, 1, 1, 0, 1, 1, 1, 0, 1], dtype=torch.int8)
    assert build_anchor_candidates(mask).tolist() == [1, 4, 5]


def test_sampled_anchors_are_distinct_sorted_capped_and_reseeded_per_epoch() -> None:
    mask = torch.ones(200, dtype=torch.int8)
    first = sample_anchors(mask, 32, anchor_seed(0, epoch=0, sample_index=7))
    again = sample_anchors(mask, 32, anchor_seed(0, epoch=0, sample_index=7))
    next_epoch = sample_anchors(mask, 32, anchor_seed(0, epoch=1, sample_index=7))
    assert len(first) == 32 and len(set(first.tolist())) == 32
    assert first.tolist() == sorted(first.tolist())
    assert torch.equal(first, again)
    assert not torch.equal(first, next_epoch)


def test_slot_weights_skip_slot_zero_and_decay_with_gamma() -> None:
    weights = build_slot_weights(5, gamma=7.0)
    assert weights[0] == 0
    for k in range(1, 5):
        assert math.isclose(float(weights[k]), math.exp(-(k - 1) / 7.0), rel_tol=1e-6)


def test_slots_hold_the_anchor_token_then_masks_and_predict_the_same_position() -> None:
    ids = torch.arange(100, 112)[None]
    mask = torch.ones(1, 12, dtype=torch.int8)
    batch = build_draft_batch(
        ids,
        mask,
        torch.tensor([12]),
        [torch.tensor([3, 5])],
        block_size=4,
        mask_token_id=MASK,
        gamma=4.0,
    )
    assert batch.block_ids.tolist() == [[103, MASK, MASK, MASK, 105, MASK, MASK, MASK]]
    assert batch.labels.tolist() == [[103, 104, 105, 106, 105, 106, 107, 108]]
    assert batch.weights[0, 0] == 0 and batch.weights[0, 4] == 0
    assert bool((batch.weights[0, [1, 2, 3, 5, 6, 7]] > 0).all())


def test_slots_past_the_sequence_or_on_unsupervised_tokens_weigh_nothing() -> None:
    ids = torch.arange(10)[None]
    mask = torch.tensor([[0, 1, 1, 1, 0, 1, 1, 1, 0, 0]], dtype=torch.int8)
    batch = build_draft_batch(
        ids,
        mask,
        torch.tensor([8]),
        [torch.tensor([2, 6])],
        block_size=4,
        mask_token_id=MASK,
        gamma=4.0,
    )
    scored = (batch.weights[0] > 0).tolist()
    # block at 2: positions 3 ok, 4 unsupervised, 5 ok; block at 6: 7 ok, 8 and 9 past seq_len
    assert scored == [False, True, False, True, False, True, False, False]


def test_a_batch_without_valid_anchors_still_has_one_zero_weight_block() -> None:
    ids = torch.arange(8).repeat(2, 1)
    mask = torch.zeros(2, 8, dtype=torch.int8)
    batch = build_draft_batch(
        ids,
        mask,
        torch.tensor([8, 8]),
        [torch.zeros(0, dtype=torch.long)] * 2,
        block_size=4,
        mask_token_id=MASK,
        gamma=4.0,
    )
    assert batch.layout.num_blocks == 1
    assert batch.num_anchors == 0
    assert batch.weight_sum == 0.0


def test_rows_with_fewer_anchors_are_padded_with_zero_weight() -> None:
    ids = torch.arange(16).repeat(2, 1)
    mask = torch.ones(2, 16, dtype=torch.int8)
    batch = build_draft_batch(
        ids,
        mask,
        torch.tensor([16, 16]),
        [torch.tensor([1, 5, 9]), torch.tensor([2])],
        block_size=4,
        mask_token_id=MASK,
        gamma=4.0,
    )
    assert batch.layout.anchors.tolist() == [[1, 5, 9], [2, 0, 0]]
    assert batch.weights[1, 4:].sum() == 0
    assert batch.num_anchors == 4


@pytest.mark.parametrize(("block", "gamma"), [(16, 7.0), (10, 5.0), (8, 4.0)])
def test_gamma_defaults_to_the_papers_value_for_its_block_sizes(block: int, gamma: float) -> None:
    assert default_gamma(block) == gamma


@pytest.mark.parametrize(("block", "gamma"), [(4, 2.0), (12, 5.667), (13, 6.0), (32, 12.333)])
def test_gamma_between_and_beyond_the_papers_sizes_follows_their_line(
    block: int, gamma: float
) -> None:
    assert default_gamma(block) == pytest.approx(gamma, abs=1e-3)
