"""The decayed block cross-entropy and per-position accuracy, computed in vocabulary chunks.

Only scored slots (weight > 0) reach the LM head, in chunks of `chunk_tokens` rows whose
logits are recomputed in backward instead of kept: at 512 anchors x B=16 and a 152K
vocabulary, full logits would take ~10 GB per sequence in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional
from torch.utils.checkpoint import checkpoint

# Default chunk: ~2^28 logits (3 GiB at the 12 B per logit a chunk's backward holds), in rows
# of 128; the memory plan (memplan/dflash_memplan/estimate.py) uses the same rule.
LOSS_CHUNK_LOGITS = 1 << 28
LOSS_CHUNK_ROW_MULTIPLE = 128


def default_loss_chunk_tokens(vocab_size: int) -> int:
    """LM-head rows per chunk sized by the vocabulary: 1,664 for Qwen3's 151,936 tokens,
    1,024 for Qwen3.5's 248,320 (a 8,192-row chunk would hold ~23 GiB at its backward)."""
    rows = LOSS_CHUNK_LOGITS // vocab_size
    return max(LOSS_CHUNK_ROW_MULTIPLE, rows // LOSS_CHUNK_ROW_MULTIPLE * LOSS_CHUNK_ROW_MULTIPLE)


@dataclass(frozen=True)
class LossParts:
    """Sums over one micro-batch; divide by the global weight sum for the reported loss."""

    scaled_loss: torch.Tensor  # what to backpropagate (already divided by the normaliser)
    weighted_ce: torch.Tensor  # sum of w * CE (detached, float32)
    correct: torch.Tensor  # [B] correct argmax predictions per slot (detached)
    count: torch.Tensor  # [B] scored slots per slot index


def _chunk_ce(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = functional.linear(hidden, weight).float()
    ce = functional.cross_entropy(logits, labels, reduction="none")
    return ce, logits.argmax(-1) == labels


def build_block_loss(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    *,
    block_size: int,
    normaliser: float,
    chunk_tokens: int,
) -> LossParts:
    """`sum(w * CE) / normaliser` over the scored slots of `hidden [b, N*B, H]`."""
    flat_weights = weights.reshape(-1)
    scored = flat_weights.nonzero().flatten()
    slot_of = scored % block_size
    device = hidden.device
    correct = torch.zeros(block_size, dtype=torch.long, device=device)
    count = torch.bincount(slot_of, minlength=block_size)
    if scored.numel() == 0:
        # Keep every drafter parameter in the graph so gradient all-reduce still happens.
        zero = hidden.sum() * 0.0
        return LossParts(zero, zero.detach().float(), correct, count)
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, scored)
    row_labels = labels.reshape(-1).index_select(0, scored)
    row_weights = flat_weights.index_select(0, scored)
    total = hidden.new_zeros((), dtype=torch.float32)
    weighted = torch.zeros((), dtype=torch.float32, device=device)
    for start in range(0, rows.shape[0], chunk_tokens):
        part = slice(start, start + chunk_tokens)
        if torch.is_grad_enabled():
            ce, hit = checkpoint(
                _chunk_ce, rows[part], lm_head_weight, row_labels[part], use_reentrant=False
            )
        else:
            ce, hit = _chunk_ce(rows[part], lm_head_weight, row_labels[part])
        chunk_sum = (ce * row_weights[part]).sum()
        total = total + chunk_sum
        weighted = weighted + chunk_sum.detach()
        correct += torch.bincount(slot_of[part][hit], minlength=block_size)
    return LossParts(total / normaliser, weighted, correct, count)
