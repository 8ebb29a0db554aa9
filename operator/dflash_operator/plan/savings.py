"""What a gate saved when it stopped a run: an estimate of the GPU-hours the stages after it
would have used. From what the run measured so far (regenerated samples and output tokens,
tokenized tokens; the canary's tokens per sample before that), the spec (maxNewTokens, epochs,
evaluation prompts) and each stage pool's throughput (`throughput` in the pools file, else
the operator's defaults). Said in an event and the operator's log; never a decision input.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_operator.api.constants import Stage
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.stages import StageContext, build_pipeline

# Rough per-GPU throughputs of an 8B-class target when the pool names none: vLLM decode with
# batching (output tokens/s per GPU) and online DFlash training (sequence tokens/s per GPU,
# the target's forward included). Real pools should say theirs (docs/operations.md).
DEFAULT_REGEN_TOKENS_PER_GPU_SECOND = 1500.0
DEFAULT_TRAIN_TOKENS_PER_GPU_SECOND = 4000.0
# A sequence is its prompt and its completion: when tokenization has not run yet.
PROMPT_SHARE = 0.3


@dataclass(frozen=True)
class Saving:
    gpu_hours: float
    stages: tuple[Stage, ...]
    basis: str


def _samples_and_tokens(ctx: StageContext, draft: Draft) -> tuple[int | None, float]:
    """(samples, completion tokens per sample) as well as the run knows them now."""
    stages = draft.status.stages
    regen = stages.regeneration if stages else None
    canary = stages.canary if stages else None
    tokenized = stages.tokenization if stages else None
    samples = (regen.samples if regen else None) or (tokenized.samples if tokenized else None)
    if samples is None:
        limits = [source.max_samples for source in ctx.spec.data.sources]
        if all(limit is not None for limit in limits):
            samples = sum(limit or 0 for limit in limits) or None
    for part in (regen, canary):
        if part and part.samples and part.output_tokens:
            return samples, part.output_tokens / part.samples
    return samples, ctx.spec.regeneration.max_new_tokens / 2


def estimate(ctx: StageContext, draft: Draft, stopped_at: Stage) -> Saving | None:
    """GPU-hours of the GPU stages after `stopped_at`; None when the sample count is unknown."""
    pipeline = build_pipeline(ctx.spec)
    later = pipeline[pipeline.index(stopped_at) + 1 :] if stopped_at in pipeline else ()
    samples, per_sample = _samples_and_tokens(ctx, draft)
    if samples is None:
        return None
    stages = draft.status.stages
    tokenized = stages.tokenization.tokens if stages and stages.tokenization else None
    sequence_tokens = tokenized or samples * per_sample / (1 - PROMPT_SHARE)
    hours = 0.0
    counted: list[Stage] = []
    for stage in later:
        placement = ctx.placements.get(stage)
        if placement is None or not placement.gpus:
            continue
        pool = placement.pool.throughput
        if stage == Stage.REGEN:
            rate = pool.regeneration_tokens_per_gpu_second or DEFAULT_REGEN_TOKENS_PER_GPU_SECOND
            hours += samples * per_sample / rate / 3600
        elif stage == Stage.TRAIN:
            rate = pool.training_tokens_per_gpu_second or DEFAULT_TRAIN_TOKENS_PER_GPU_SECOND
            hours += ctx.spec.training.epochs * sequence_tokens / rate / 3600
        elif stage == Stage.EVAL:
            rate = pool.regeneration_tokens_per_gpu_second or DEFAULT_REGEN_TOKENS_PER_GPU_SECOND
            evaluation = ctx.spec.evaluation
            hours += evaluation.max_prompts * evaluation.max_new_tokens / rate / 3600
        else:
            continue
        counted.append(stage)
    if not counted:
        return None
    basis = (
        f"{samples:,} samples x {per_sample:,.0f} output tokens, {ctx.spec.training.epochs} "
        "epochs, at the pools' throughput (pools file `throughput`, else the operator's defaults)"
    )
    return Saving(gpu_hours=hours, stages=tuple(counted), basis=basis)
