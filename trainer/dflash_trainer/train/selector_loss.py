"""DFlash2's selector loss: a K-way cross-entropy over the unary top-K, teacher-forced.

As speculators 0.9.0 trains it: the predecessor of slot k is the data token at slot k-1, the
target is the verifier's argmax, injected at rank K when the top-K misses it. The unary
(DFlash) loss is `train/loss.py`; the combined loss is `unary + weight * selector`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional

from dflash_trainer.model.dflash2_selector import CandidateSelector, top_candidates


@dataclass(frozen=True)
class SelectorCandidates:
    """The training candidate set of each row and where its target sits in it."""

    ids: torch.Tensor  # [n, K] unary top-K, the last replaced by the target where missing
    target_index: torch.Tensor  # [n] the target's column in `ids`
    contains_target: torch.Tensor  # [n] bool: the serving top-K already held the target


@dataclass(frozen=True)
class SelectorLossParts:
    """Sums over one micro-batch, like `train/loss.py`'s `LossParts`."""

    scaled_loss: torch.Tensor  # sum(w * CE) / normaliser, to backpropagate
    weighted_ce: torch.Tensor  # sum(w * CE), detached float32
    recall: torch.Tensor  # scored rows whose target was in the serving top-K
    correct: torch.Tensor  # scored rows the selector ranks first, target in the serving top-K


def build_selector_candidates(
    candidate_ids: torch.Tensor, target_ids: torch.Tensor
) -> SelectorCandidates:
    """Inject each missing target in place of the weakest candidate, so every row has a label
    without widening the selector beyond K."""
    top_k = candidate_ids.shape[-1]
    matches = candidate_ids == target_ids.unsqueeze(-1)
    contains = matches.any(-1)
    # argmax of a bool row is its first True; rows without one get the injected last column.
    index = torch.where(contains, matches.long().argmax(-1), top_k - 1)
    ids = candidate_ids.clone()
    ids[..., -1] = torch.where(contains, candidate_ids[..., -1], target_ids)
    return SelectorCandidates(ids, index, contains)


def teacher_forced_predecessors(block_tokens: torch.Tensor, block_size: int) -> torch.Tensor:
    """`block_tokens [..., N*B]` (the data's tokens at each slot, the anchor at slot 0) -> the
    predecessor of every slot: slot k-1's token; slot 0 keeps its own (never scored)."""
    blocks = block_tokens.view(*block_tokens.shape[:-1], -1, block_size)
    shifted = torch.cat([blocks[..., :1], blocks[..., :-1]], dim=-1)
    return shifted.flatten(-2)


def build_selector_loss(
    selector: CandidateSelector,
    hidden: torch.Tensor,
    unary_logits: torch.Tensor,
    predecessor_ids: torch.Tensor,
    target_ids: torch.Tensor,
    weights: torch.Tensor,
    *,
    normaliser: float,
) -> SelectorLossParts:
    """`sum(w * CE_K) / normaliser` over rows: `hidden [n, H]`, `unary_logits [n, V]`,
    `predecessor_ids`, `target_ids`, `weights [n]` (the unary loss's weights and normaliser,
    so both terms are averaged alike, as speculators does)."""
    candidates = build_training_candidates(unary_logits, target_ids, selector.top_k)
    # Gradients reach the unary logits too: speculators gathers them without detaching.
    unary = unary_logits.gather(-1, candidates.ids)
    return build_selector_loss_on_candidates(
        selector, hidden, unary, predecessor_ids, candidates, weights, normaliser=normaliser
    )


def build_training_candidates(
    unary_logits: torch.Tensor, target_ids: torch.Tensor, top_k: int
) -> SelectorCandidates:
    """The unary top-K of `unary_logits [n, V]` with each missing target injected."""
    candidate_ids, _ = top_candidates(unary_logits.detach(), top_k)
    return build_selector_candidates(candidate_ids, target_ids)


def build_selector_loss_on_candidates(
    selector: CandidateSelector,
    hidden: torch.Tensor,
    unary: torch.Tensor,
    predecessor_ids: torch.Tensor,
    candidates: SelectorCandidates,
    weights: torch.Tensor,
    *,
    normaliser: float,
) -> SelectorLossParts:
    """The selector loss from the candidates' unary logits `unary [n, K]` (gathered inside the
    chunked LM-head loss, `train/loss.py`, so the full `[n, V]` logits never live at once).
    The selector is called as a module: under FSDP2 that gathers its codebooks."""
    transition = selector(hidden, predecessor_ids, candidates.ids)
    scores = unary.float() + transition.float()
    ce = functional.cross_entropy(scores, candidates.target_index, reduction="none")
    weighted = (ce * weights).sum()
    scored = weights > 0
    first = scores.detach().argmax(-1) == candidates.target_index
    return SelectorLossParts(
        scaled_loss=weighted / normaliser,
        weighted_ce=weighted.detach().float(),
        recall=(candidates.contains_target & scored).sum(),
        correct=(first & candidates.contains_target & scored).sum(),
    )
