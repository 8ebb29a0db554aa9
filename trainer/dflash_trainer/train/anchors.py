"""Anchors and draft blocks: which positions start a block, what each slot sees and predicts.

An anchor is valid only where it and the next token are supervised (`loss_mask == 1`).
Up to `anchors_per_sequence` anchors are drawn per sequence without replacement, from a
generator seeded by (seed, epoch, sample index): resampled each epoch, identical on any
number of ranks, and reproducible after a resume. Slot k of the block at anchor a holds
the mask token (slot 0: the real token at a) and is labelled with the token at a+k
("same position" labels); slot 0 is never scored; slot k weighs `exp(-(k-1)/gamma)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dflash_trainer.model.block_attention import BlockLayout

# The paper's loss decay per block size (DFlash App. A.1): gamma 7 for B=16, 5 for 10, 4 for 8.
PAPER_GAMMAS: dict[int, float] = {8: 4.0, 10: 5.0, 16: 7.0}

# Mixes (seed, epoch, sample) into one 63-bit generator seed; any large odd constants do.
_SEED_MIX = (1_000_003, 998_244_353)


def build_anchor_candidates(loss_mask: torch.Tensor) -> torch.Tensor:
    """Positions a with `loss_mask[a] == loss_mask[a+1] == 1` (1-D, ascending)."""
    supervised = loss_mask.bool()
    ok = supervised[:-1] & supervised[1:]
    return ok.nonzero().flatten()


def anchor_seed(seed: int, epoch: int, sample_index: int) -> int:
    mixed = (seed * _SEED_MIX[0] + epoch) * _SEED_MIX[1] + sample_index
    return mixed % (2**63 - 1)


def sample_anchors(loss_mask: torch.Tensor, max_anchors: int, seed: int) -> torch.Tensor:
    """Up to `max_anchors` distinct valid anchors, sorted ascending (may be empty)."""
    candidates = build_anchor_candidates(loss_mask)
    if candidates.numel() <= max_anchors:
        return candidates
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(candidates.numel(), generator=generator)[:max_anchors]
    return candidates[chosen].sort().values


def default_gamma(block_size: int) -> float:
    """The paper's gamma for its block sizes; between them a straight line through the
    neighbours, below 8 half the block (as 8 -> 4 and 10 -> 5), above 16 the slope of 10-16."""
    if block_size in PAPER_GAMMAS:
        return PAPER_GAMMAS[block_size]
    sizes = sorted(PAPER_GAMMAS)
    if block_size < sizes[0]:
        return block_size / 2
    if block_size > sizes[-1]:
        low, high = sizes[-2], sizes[-1]
    else:
        low = max(s for s in sizes if s < block_size)
        high = min(s for s in sizes if s > block_size)
    slope = (PAPER_GAMMAS[high] - PAPER_GAMMAS[low]) / (high - low)
    return round(PAPER_GAMMAS[low] + slope * (block_size - low), 3)


def build_slot_weights(block_size: int, gamma: float) -> torch.Tensor:
    """`[B]`: 0 for slot 0, `exp(-(k-1)/gamma)` for slot k >= 1."""
    k = torch.arange(block_size, dtype=torch.float32)
    weights = torch.exp(-(k - 1) / gamma)
    weights[0] = 0.0
    return weights


@dataclass(frozen=True)
class DraftBatch:
    """One micro-batch's draft blocks; every tensor is on the training device."""

    layout: BlockLayout
    block_ids: torch.Tensor  # [b, N*B] token fed to each slot (real token at slot 0, else MASK)
    labels: torch.Tensor  # [b, N*B] token each slot must predict
    weights: torch.Tensor  # [b, N*B] loss weight (0 where not scored)
    num_anchors: int  # real (not padding) anchors in the batch

    @property
    def weight_sum(self) -> float:
        return float(self.weights.sum())


def build_draft_batch(
    input_ids: torch.Tensor,
    loss_mask: torch.Tensor,
    seq_lens: torch.Tensor,
    anchors: list[torch.Tensor],
    *,
    block_size: int,
    mask_token_id: int,
    gamma: float,
) -> DraftBatch:
    """Blocks for right-padded `input_ids/loss_mask [b, S]` and per-row sorted anchors.

    Rows with fewer anchors are padded with anchor 0 and weight 0. A batch without any
    valid anchor still gets one zero-weight block, so every rank runs the same forward and
    backward (a rank that skipped them would hang the others' gradient all-reduce).
    """
    bsz, context_len = input_ids.shape
    device = input_ids.device
    num_blocks = max(1, max((int(a.numel()) for a in anchors), default=0))
    padded = torch.zeros(bsz, num_blocks, dtype=torch.long)
    real = torch.zeros(bsz, num_blocks, dtype=torch.bool)
    for row, row_anchors in enumerate(anchors):
        padded[row, : row_anchors.numel()] = row_anchors
        real[row, : row_anchors.numel()] = True
    padded, real = padded.to(device), real.to(device)

    offsets = torch.arange(block_size, device=device)
    positions = padded[:, :, None] + offsets  # [b, N, B]
    in_range = positions < seq_lens.to(device)[:, None, None]
    gather_at = positions.clamp(max=context_len - 1).reshape(bsz, -1)
    labels = input_ids.gather(1, gather_at)
    supervised = loss_mask.gather(1, gather_at).bool().view(bsz, num_blocks, block_size)

    slot_weights = build_slot_weights(block_size, gamma).to(device)
    weights = slot_weights * (in_range & supervised & real[:, :, None])

    block_ids = torch.full_like(labels, mask_token_id).view(bsz, num_blocks, block_size)
    block_ids[:, :, 0] = input_ids.gather(1, padded)
    return DraftBatch(
        layout=BlockLayout(anchors=padded, context_len=context_len, block_size=block_size),
        block_ids=block_ids.view(bsz, -1),
        labels=labels,
        weights=weights.view(bsz, -1),
        num_anchors=int(real.sum()),
    )
