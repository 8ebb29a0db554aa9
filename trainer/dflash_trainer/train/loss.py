"""The decayed block cross-entropy and per-position accuracy, computed in vocabulary chunks.

Only scored slots (weight > 0) reach the LM head, in chunks of `chunk_tokens` rows whose
logits are recomputed in backward instead of kept: at 512 anchors x B=16 and a 152K
vocabulary, full logits would take ~10 GB per sequence in bf16. For DFlash2 each chunk also
takes its unary top-K (the verifier's argmax injected) and the selector's K-way loss is added
(`train/selector_loss.py`) from those `[rows, K]` logits, once per micro-batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.nn import functional
from torch.utils.checkpoint import checkpoint

from dflash_trainer.model.dflash2_selector import CandidateSelector
from dflash_trainer.train.selector_loss import (
    SelectorCandidates,
    SelectorLossParts,
    build_selector_loss_on_candidates,
    build_training_candidates,
)

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
    selector: SelectorLossParts | None = None  # DFlash2: the selector's term (unweighted)


@dataclass(frozen=True)
class SelectorTerm:
    """DFlash2's inputs to the loss, each `[b, N*B]` like the labels: the predecessor of every
    slot (teacher-forced from the data) and the selector's target (the verifier's argmax)."""

    selector: CandidateSelector
    predecessor_ids: torch.Tensor
    target_ids: torch.Tensor
    weight: float


def _chunk_ce(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = functional.linear(hidden, weight).float()
    ce = functional.cross_entropy(logits, labels, reduction="none")
    return ce, logits.argmax(-1) == labels


def _chunk_ce_and_candidates(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    targets: torch.Tensor,
    top_k: int,
) -> tuple[torch.Tensor, ...]:
    """`_chunk_ce` plus the selector's candidates and their unary logits `[n, K]` (with grad)."""
    logits = functional.linear(hidden, weight).float()
    ce = functional.cross_entropy(logits, labels, reduction="none")
    candidates = build_training_candidates(logits, targets, top_k)
    unary = logits.gather(-1, candidates.ids)
    hit = logits.argmax(-1) == labels
    return ce, hit, unary, candidates.ids, candidates.target_index, candidates.contains_target


def build_block_loss(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor,
    *,
    block_size: int,
    normaliser: float,
    chunk_tokens: int,
    selector_term: SelectorTerm | None = None,
) -> LossParts:
    """`sum(w * CE) / normaliser` over the scored slots of `hidden [b, N*B, H]`, plus
    `selector_term.weight *` the selector's `sum(w * CE_K) / normaliser` for DFlash2."""
    flat_weights = weights.reshape(-1)
    scored = flat_weights.nonzero().flatten()
    slot_of = scored % block_size
    device = hidden.device
    correct = torch.zeros(block_size, dtype=torch.long, device=device)
    count = torch.bincount(slot_of, minlength=block_size)
    if scored.numel() == 0:
        # Keep every drafter parameter in the graph so gradient all-reduce still happens.
        zero = hidden.sum() * 0.0
        empty = None
        if selector_term is not None:
            # The selector too, called as a module, so every rank gathers and reduces it.
            one_row = hidden.reshape(-1, hidden.shape[-1])[:1]
            ids = torch.zeros(1, selector_term.selector.top_k, dtype=torch.long, device=device)
            zero = zero + selector_term.selector(one_row, ids[:, 0], ids).sum() * 0.0
            nothing = torch.zeros((), dtype=torch.long, device=device)
            empty = SelectorLossParts(zero, zero.detach().float(), nothing, nothing)
        return LossParts(zero, zero.detach().float(), correct, count, empty)
    rows = hidden.reshape(-1, hidden.shape[-1]).index_select(0, scored)
    row_labels = labels.reshape(-1).index_select(0, scored)
    row_weights = flat_weights.index_select(0, scored)
    total = hidden.new_zeros((), dtype=torch.float32)
    weighted = torch.zeros((), dtype=torch.float32, device=device)
    row_targets = None if selector_term is None else selector_term.target_ids.reshape(-1)[scored]
    gathered: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, rows.shape[0], chunk_tokens):
        part = slice(start, start + chunk_tokens)
        args: tuple[object, ...] = (rows[part], lm_head_weight, row_labels[part])
        function: Callable[..., tuple[torch.Tensor, ...]] = _chunk_ce
        if selector_term is not None and row_targets is not None:
            args = (*args, row_targets[part], selector_term.selector.top_k)
            function = _chunk_ce_and_candidates
        if torch.is_grad_enabled():
            outputs = checkpoint(function, *args, use_reentrant=False)
        else:
            outputs = function(*args)
        ce, hit, extra = outputs[0], outputs[1], tuple(outputs[2:])
        chunk_sum = (ce * row_weights[part]).sum()
        total = total + chunk_sum
        weighted = weighted + chunk_sum.detach()
        correct += torch.bincount(slot_of[part][hit], minlength=block_size)
        gathered.append(extra)
    scaled = total / normaliser
    selector_parts = None
    if selector_term is not None:
        unary, ids, index, contains = (torch.cat(column) for column in zip(*gathered, strict=True))
        selector_parts = build_selector_loss_on_candidates(
            selector_term.selector,
            rows,
            unary,
            selector_term.predecessor_ids.reshape(-1)[scored],
            SelectorCandidates(ids, index, contains),
            row_weights,
            normaliser=normaliser,
        )
        scaled = scaled + selector_term.weight * selector_parts.scaled_loss
    return LossParts(scaled, weighted, correct, count, selector_parts)
