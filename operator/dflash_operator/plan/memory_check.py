"""Admission: will the drafter train in the training pool's GPU memory? Pure.

Runs before any stage starts (and before training starts, after an edit), so a run that would
run out of memory in training never spends a regeneration. Target shapes come from the
built-in table (`dflash_memplan/known.py`): the operator reads no model files; an unknown
target is admitted with a MemoryCheckSkipped event. The arithmetic is the dflash-memplan
package (`memplan/dflash_memplan/`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dflash_memplan.allocator import alloc_conf_of, is_expandable
from dflash_memplan.estimate import (
    RankSetup,
    default_loss_chunk_tokens,
    estimate_rank_memory,
)
from dflash_memplan.fixes import SPEC_FIELDS, Fix, Knob, find_fixes, spec_value
from dflash_memplan.known import known_target_names, known_target_shape
from dflash_memplan.report import format_fixes, format_terms_inline, gib
from dflash_memplan.shapes import DFlash2Shape, DrafterShape, TargetShape, build_drafter_shape

from dflash_operator.api.constants import Reason, Stage
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.spec_model import DFlash2Spec, DrafterArchitecture, DrafterSpec
from dflash_operator.api.spec_training import Strategy
from dflash_operator.plan import outcomes
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.placement import Placement

_STRATEGIES = {Strategy.DDP: "ddp", Strategy.FSDP: "fsdp2"}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class MemoryCheck:
    """`fits` None: the check was skipped (`message` says why)."""

    fits: bool | None
    message: str


def build_rank_inputs(
    spec: DFlashRunSpec,
    target: TargetShape,
    world_size: int,
    pool_env: Mapping[str, str] | None = None,
) -> tuple[DrafterShape, RankSetup]:
    """The drafter and rank setup the trainer will get from this spec (config_map.py) in a
    pool with this env (children/pod.py: expandable segments unless the pool sets its own)."""
    conf = alloc_conf_of(pool_env or {})
    drafter = build_drafter_shape(
        target,
        num_layers=spec.drafter.num_layers,
        block_size=spec.drafter.block_size,
        target_layer_ids=(
            list(spec.drafter.target_layer_ids) if spec.drafter.target_layer_ids else None
        ),
        dflash2=build_dflash2_shape(spec.drafter),
    )
    training = spec.training
    setup = RankSetup(
        batch_size=training.batch_size,
        max_seq_len=spec.tokenization.max_seq_len,
        anchors_per_sequence=training.anchors_per_sequence,
        loss_chunk_tokens=default_loss_chunk_tokens(target.vocab_size),
        grad_accum=training.gradient_accumulation_steps,
        world_size=world_size,
        strategy="fsdp2" if _STRATEGIES[training.strategy] == "fsdp2" else "ddp",
        device="cuda",
        target_bytes=_DTYPE_BYTES[spec.target.dtype.value],
        activation_checkpointing=training.activation_checkpointing,
        expandable_segments=conf is None or is_expandable(conf),
        monitor_every_steps=spec.audit.likelihood.monitor_every_steps,
    )
    return drafter, setup


def build_dflash2_shape(drafter: DrafterSpec) -> DFlash2Shape | None:
    """DFlash2's knobs as the trainer gets them (config_map.py: the defaults when
    `spec.drafter.dflash2` is unset); None for a DFlash drafter."""
    if drafter.architecture is not DrafterArchitecture.DFLASH2:
        return None
    knobs = drafter.dflash2 or DFlash2Spec()
    return DFlash2Shape(
        conv_kernel_size=knobs.conv_kernel_size,
        conv_group_size=knobs.conv_group_size,
        selector_rank=knobs.selector_rank,
        selector_top_k=knobs.selector_top_k,
    )


def check_training_memory(spec: DFlashRunSpec, placement: Placement) -> MemoryCheck | None:
    """None when there is nothing to check: a CPU pool, or a pool without gpuMemory."""
    capacity = placement.pool.gpu_memory_bytes
    if capacity is None or placement.gpus == 0:
        return None
    target = known_target_shape(spec.target.model)
    if target is None:
        return MemoryCheck(
            None,
            Reason.MEMORY_CHECK_SKIPPED.message(
                why=f"spec.target.model={spec.target.model} is not in the operator's table of "
                f"known targets ({known_target_names()}); check it with `python -m "
                "dflash_trainer.plan <run.yaml> --target-config <config.json> --gpu-memory "
                f"{placement.pool.gpu_memory}`"
            ),
        )
    world = spec.training.nodes * placement.processes
    drafter, setup = build_rank_inputs(spec, target, world, placement.pool.env)
    estimate = estimate_rank_memory(target, drafter, setup)
    if estimate.fits(capacity):
        return MemoryCheck(True, f"training needs {gib(estimate.total_bytes)} of {gib(capacity)}")
    fixes = [
        Fix(f.knob, spec_value(f.value), f.total_bytes)
        for f in find_fixes(target, drafter, setup, capacity)
        if f.knob in SPEC_FIELDS
    ]
    current: dict[Knob, object] = {
        "batch_size": setup.batch_size,
        "anchors_per_sequence": setup.anchors_per_sequence,
        "activation_checkpointing": setup.activation_checkpointing,
        "strategy": spec.training.strategy.value,
        "max_seq_len": setup.max_seq_len,
        "world_size": world,
        "monitor_every_steps": setup.monitor_every_steps,
    }
    fix_text = format_fixes(fixes, SPEC_FIELDS, current)
    if fixes:
        fix_text += f", or a node pool with more GPU memory than {placement.pool_name}"
    return MemoryCheck(
        False,
        Reason.TRAINING_WONT_FIT.message(
            needed=gib(estimate.total_bytes),
            pool=placement.pool_name,
            capacity=gib(capacity),
            terms=format_terms_inline(estimate),
            fixes=fix_text,
        ),
    )


def admit_training_memory(
    spec: DFlashRunSpec, placements: Mapping[Stage, Placement], draft: Draft, first_pass: bool
) -> bool:
    """Until training starts, a run whose training cannot fit the pool's GPU memory fails
    (before any GPU is spent on regeneration); False when it did."""
    placement = placements.get(Stage.TRAIN)
    if placement is None or draft.attempt(Stage.TRAIN) > 0:
        return True
    check = check_training_memory(spec, placement)
    if check is None or check.fits:
        return True
    if check.fits is None:
        if first_pass:
            draft.event(Reason.MEMORY_CHECK_SKIPPED, check.message)
        return True
    outcomes.fail_run(draft, Reason.TRAINING_WONT_FIT, check.message)
    return False
