"""What to change when a rank does not fit: each knob the trainer has, tried alone from the
current setup, with the value that fits (None when that knob alone cannot make it fit).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from dflash_memplan.estimate import (
    LOSS_CHUNK_ROW_MULTIPLE,
    RankSetup,
    estimate_rank_memory,
)
from dflash_memplan.shapes import DrafterShape, TargetShape

Knob = Literal[
    "batch_size", "anchors_per_sequence", "activation_checkpointing", "loss_chunk_tokens",
    "strategy", "max_seq_len", "world_size", "monitor_every_steps",
]  # fmt: skip
# The DFlashRun spec field behind each knob a fix may change, shared by the operator's
# admission message and `python -m dflash_trainer.plan` on a DFlashRun. The loss chunk is not
# a spec field: the trainer sizes it by the vocabulary.
SPEC_FIELDS: dict[Knob, str] = {
    "batch_size": "spec.training.batchSize",
    "anchors_per_sequence": "spec.training.anchorsPerSequence",
    "activation_checkpointing": "spec.training.activationCheckpointing",
    "strategy": "spec.training.strategy",
    "max_seq_len": "spec.tokenization.maxSeqLen",
    "world_size": "GPUs in all (spec.training.nodes x gpusPerNode)",
    "monitor_every_steps": "spec.audit.likelihood.monitorEverySteps",
}
# Sequence lengths are tried in steps of 256 tokens, never below 512.
SEQ_LEN_STEP = 256
MIN_SEQ_LEN = 512
# Anchors are halved down to 64 per sequence (fewer blocks per step, not a smaller model).
MIN_ANCHORS = 64
# More ranks only shrink FSDP2's shards; the search stops at 8 nodes of 8 GPUs.
MAX_WORLD_SIZE = 64


@dataclass(frozen=True)
class Fix:
    knob: Knob
    value: int | str | bool
    total_bytes: int


def _fits(target: TargetShape, drafter: DrafterShape, setup: RankSetup, capacity: int) -> int:
    """The total when `setup` fits `capacity`, else -1."""
    total = estimate_rank_memory(target, drafter, setup).total_bytes
    return total if total <= capacity else -1


def find_fixes(
    target: TargetShape, drafter: DrafterShape, setup: RankSetup, capacity: int
) -> list[Fix]:
    """One fix per knob that alone makes the rank fit, mildest value first."""
    fixes: list[Fix] = []
    for batch in range(setup.batch_size - 1, 0, -1):
        total = _fits(target, drafter, replace(setup, batch_size=batch), capacity)
        if total >= 0:
            fixes.append(Fix("batch_size", batch, total))
            break
    if not setup.activation_checkpointing:
        total = _fits(target, drafter, replace(setup, activation_checkpointing=True), capacity)
        if total >= 0:
            fixes.append(Fix("activation_checkpointing", True, total))
    anchors = setup.anchors_per_sequence // 2
    while anchors >= MIN_ANCHORS:
        total = _fits(target, drafter, replace(setup, anchors_per_sequence=anchors), capacity)
        if total >= 0:
            fixes.append(Fix("anchors_per_sequence", anchors, total))
            break
        anchors //= 2
    chunk = setup.loss_chunk_tokens // 2 // LOSS_CHUNK_ROW_MULTIPLE * LOSS_CHUNK_ROW_MULTIPLE
    while chunk >= LOSS_CHUNK_ROW_MULTIPLE:
        total = _fits(target, drafter, replace(setup, loss_chunk_tokens=chunk), capacity)
        if total >= 0:
            fixes.append(Fix("loss_chunk_tokens", chunk, total))
            break
        chunk //= 2
    if setup.strategy == "ddp" and setup.world_size > 1:
        total = _fits(target, drafter, replace(setup, strategy="fsdp2"), capacity)
        if total >= 0:
            fixes.append(Fix("strategy", "fsdp2", total))
    if setup.sharded:
        for world in range(setup.world_size + 1, MAX_WORLD_SIZE + 1):
            total = _fits(target, drafter, replace(setup, world_size=world), capacity)
            if total >= 0:
                fixes.append(Fix("world_size", world, total))
                break
    seq = (setup.max_seq_len - 1) // SEQ_LEN_STEP * SEQ_LEN_STEP
    while seq >= MIN_SEQ_LEN:
        total = _fits(target, drafter, replace(setup, max_seq_len=seq), capacity)
        if total >= 0:
            fixes.append(Fix("max_seq_len", seq, total))
            break
        seq -= SEQ_LEN_STEP
    # Last: turning the likelihood monitor off gives up the in-training data check.
    if setup.monitored:
        total = _fits(target, drafter, replace(setup, monitor_every_steps=0), capacity)
        if total >= 0:
            fixes.append(Fix("monitor_every_steps", 0, total))
    return fixes


def spec_value(value: int | str | bool) -> int | str | bool:
    """A knob's value in the spec's words: the spec spells the trainer's `fsdp2` as `fsdp`."""
    return "fsdp" if value == "fsdp2" else value
