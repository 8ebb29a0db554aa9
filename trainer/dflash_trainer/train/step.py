"""One optimizer step of online DFlash training: target taps -> anchors -> drafter -> loss.

The global batch's loss is `sum(w * CE) / sum(w)` over every rank and micro-batch, so the
weight sum is all-reduced before any backward; each rank scales its share by the world
size because DDP / FSDP2 average gradients. Every rank runs the same number of forwards
and backwards, even with no valid anchor (see `build_draft_batch`). A DFlash2 drafter (one with
a `candidate_selector`) runs the target to its end for the selector's targets and adds the
selector's loss (`train/loss.py`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from dflash_trainer.model.block_attention import Backend
from dflash_trainer.model.dflash2_selector import CandidateSelector
from dflash_trainer.model.taps import TargetTaps
from dflash_trainer.model.target import TargetParts
from dflash_trainer.train.anchors import DraftBatch, anchor_seed, build_draft_batch, sample_anchors
from dflash_trainer.train.batches import TokenRows, collate
from dflash_trainer.train.distributed import DistEnv, all_reduce_sum, unwrap
from dflash_trainer.train.loss import SelectorTerm, build_block_loss
from dflash_trainer.train.selector_loss import teacher_forced_predecessors
from dflash_trainer.train.verifier_targets import build_verifier_argmax

# Avoids dividing by zero when a whole global batch has no supervised block slot.
MIN_NORMALISER = 1e-6


@dataclass(frozen=True)
class ObjectiveSettings:
    block_size: int
    mask_token_id: int
    gamma: float
    anchors_per_sequence: int
    max_seq_len: int
    loss_chunk_tokens: int
    backend: Backend
    chunk_queries: int
    seed: int
    # DFlash2: the selector loss's weight next to the unary loss (None for DFlash).
    selector_loss_weight: float | None = None


@dataclass(frozen=True)
class MicroBatch:
    input_ids: torch.Tensor
    seq_lens: torch.Tensor
    draft: DraftBatch
    # For the likelihood monitor: which tokens are supervised, and which rows these are.
    loss_mask: torch.Tensor | None = None
    rows: np.ndarray | None = None


# Called with a micro-batch and the target's final hidden states on monitored steps.
Observer = Callable[[MicroBatch, torch.Tensor], None]


@dataclass(frozen=True)
class StepOutcome:
    loss: float
    correct: list[int]
    count: list[int]
    tokens: int
    anchors: int
    target_seconds: float
    drafter_seconds: float
    grad_norm: float
    # DFlash2 only: the selector's K-way CE (same normalisation as `loss`), the share of scored
    # slots whose target was in the unary top-K, and the share it ranked first.
    selector_loss: float | None = None
    selector_recall: float | None = None
    selector_accuracy: float | None = None


def build_micro_batch(
    rows: TokenRows,
    indices: np.ndarray,
    epoch: int,
    settings: ObjectiveSettings,
    device: torch.device,
) -> MicroBatch:
    """Collate rows and draw their anchors (seeded by sample index and epoch)."""
    input_ids, loss_mask, seq_lens = collate(rows, indices, settings.max_seq_len, device)
    mask_cpu = loss_mask.cpu()
    anchors = [
        sample_anchors(
            mask_cpu[j, : int(seq_lens[j])],
            settings.anchors_per_sequence,
            anchor_seed(settings.seed, epoch, int(index)),
        )
        for j, index in enumerate(indices)
    ]
    draft = build_draft_batch(
        input_ids,
        loss_mask,
        seq_lens,
        anchors,
        block_size=settings.block_size,
        mask_token_id=settings.mask_token_id,
        gamma=settings.gamma,
    )
    return MicroBatch(input_ids, seq_lens, draft, loss_mask, np.asarray(indices))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(device: torch.device) -> contextlib.AbstractContextManager[object]:
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@contextlib.contextmanager
def gradient_sync(model: nn.Module, sync: bool) -> Iterator[None]:
    """Reduce the gradients across ranks only when `sync` (the last micro-batch of a step).

    FSDP2 modules have no `no_sync()`: `set_requires_gradient_sync(False)` skips their
    reduce-scatter, and the gradients accumulate unsharded in the reduce dtype until the last
    micro-batch. DDP skips its all-reduce inside `no_sync()`. One process: nothing to skip.
    """
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(sync)
        yield
        return
    no_sync = getattr(model, "no_sync", None)
    if sync or not callable(no_sync):
        yield
        return
    with no_sync():
        yield


def run_train_step(
    *,
    model: nn.Module,
    target: TargetParts,
    taps: TargetTaps,
    micro_batches: list[MicroBatch],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    settings: ObjectiveSettings,
    grad_clip: float,
    env: DistEnv,
    observe: Observer | None = None,
) -> StepOutcome:
    """Forward/backward every micro-batch, clip, step; returns globally reduced metrics.
    `observe` (monitored steps): the target forward runs to its last layer, and the observer
    gets its final hidden states (train/likelihood_monitor.py)."""
    device = env.device
    local_weight = sum(mb.draft.weight_sum for mb in micro_batches)
    global_weight = float(
        all_reduce_sum(torch.tensor([local_weight], dtype=torch.float64, device=device), env)[0]
    )
    normaliser = max(global_weight, MIN_NORMALISER) / env.world_size
    block = settings.block_size
    # [weighted CE, tokens, correct per slot, count per slot, selector CE, recall, correct]
    stats = torch.zeros(5 + 2 * block, dtype=torch.float64, device=device)
    target_seconds = drafter_seconds = 0.0
    lm_weight = target.lm_head_weight
    selector = getattr(unwrap(model), "candidate_selector", None)
    for i, mb in enumerate(micro_batches):
        _sync(device)
        start = time.perf_counter()
        selector_term = None
        if observe is None and selector is None:
            features = taps.features(mb.input_ids)
        else:
            features, final_hidden = taps.features_and_hidden(mb.input_ids)
            if observe is not None:
                observe(mb, final_hidden)
            if isinstance(selector, CandidateSelector):
                selector_term = build_selector_term(selector, mb, final_hidden, lm_weight, settings)
            # Freed before the drafter runs: the memory plan counts it only until here.
            del final_hidden
        block_embeds = target.embed(mb.draft.block_ids)
        _sync(device)
        middle = time.perf_counter()
        with gradient_sync(model, sync=i == len(micro_batches) - 1):
            with _autocast(device):
                hidden = model(
                    block_embeds,
                    features,
                    mb.draft.layout,
                    backend=settings.backend,
                    chunk_queries=settings.chunk_queries,
                )
                parts = build_block_loss(
                    hidden,
                    lm_weight,
                    mb.draft.labels,
                    mb.draft.weights,
                    block_size=block,
                    normaliser=normaliser,
                    chunk_tokens=settings.loss_chunk_tokens,
                    selector_term=selector_term,
                )
            parts.scaled_loss.backward()  # type: ignore[no-untyped-call]
        _sync(device)
        target_seconds += middle - start
        drafter_seconds += time.perf_counter() - middle
        stats[0] += parts.weighted_ce.double()
        stats[1] += float(mb.seq_lens.sum())
        stats[2 : 2 + block] += parts.correct.double()
        stats[2 + block : 2 + 2 * block] += parts.count.double()
        if parts.selector is not None:
            stats[-3] += parts.selector.weighted_ce.double()
            stats[-2] += parts.selector.recall.double()
            stats[-1] += parts.selector.correct.double()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip or float("inf"))
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    anchors = torch.tensor(
        [sum(mb.draft.num_anchors for mb in micro_batches)], dtype=torch.float64, device=device
    )
    all_reduce_sum(stats, env)
    all_reduce_sum(anchors, env)
    values = stats.cpu().tolist()
    count = [int(v) for v in values[2 + block : 2 + 2 * block]]
    scored = max(sum(count), 1)
    dflash2 = selector is not None
    return StepOutcome(
        loss=values[0] / max(global_weight, MIN_NORMALISER),
        correct=[int(v) for v in values[2 : 2 + block]],
        count=count,
        tokens=int(values[1]),
        anchors=int(anchors.item()),
        target_seconds=target_seconds,
        drafter_seconds=drafter_seconds,
        grad_norm=float(
            grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        ),
        selector_loss=values[-3] / max(global_weight, MIN_NORMALISER) if dflash2 else None,
        selector_recall=values[-2] / scored if dflash2 else None,
        selector_accuracy=values[-1] / scored if dflash2 else None,
    )


def build_selector_term(
    selector: CandidateSelector,
    mb: MicroBatch,
    final_hidden: torch.Tensor,
    lm_weight: torch.Tensor,
    settings: ObjectiveSettings,
) -> SelectorTerm:
    """DFlash2's loss inputs: predecessors teacher-forced from the data (slot 0's is the
    anchor), targets the verifier's argmax (speculators 0.9.0's `selector_training_candidates`)."""
    draft = mb.draft
    targets = build_verifier_argmax(
        final_hidden,
        lm_weight,
        draft.layout.anchors,
        draft.labels,
        draft.weights,
        block_size=settings.block_size,
        chunk_tokens=settings.loss_chunk_tokens,
    )
    return SelectorTerm(
        selector=selector,
        predecessor_ids=teacher_forced_predecessors(draft.labels, settings.block_size),
        target_ids=targets,
        weight=1.0 if settings.selector_loss_weight is None else settings.selector_loss_weight,
    )
