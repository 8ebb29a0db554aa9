"""`batch/v1` Jobs of the pipeline: the Indexed regeneration Job (one index per shard, retries
per index) and the single-pod Jobs of audit, tokenization, evaluation and S3 cleanup.
"""

from __future__ import annotations

from typing import Any

from dflash_operator.api.constants import Gate, Stage
from dflash_operator.api.naming import child_name
from dflash_operator.api.spec_storage import CleanupPolicy
from dflash_operator.children import commands
from dflash_operator.children.meta import build_metadata
from dflash_operator.children.pod import PodContext, build_container, build_pod_template

# Exit codes of the stage entry points (docs/data-contracts.md section 5).
EXIT_BAD_INPUT = 2
EXIT_GATE_FAILED = 3
# A finished cleanup Job stays an hour for inspection, then deletes itself.
CLEANUP_JOB_TTL_SECONDS = 3600
# Pods evicted or preempted do not count against a Job's retries.
_IGNORE_DISRUPTIONS = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}


def _fail_on_exit_codes(action: str, codes: list[int]) -> dict[str, Any]:
    return {"action": action, "onExitCodes": {"operator": "In", "values": codes}}


def _job(
    ctx: PodContext,
    name: str,
    container: dict[str, Any],
    spec: dict[str, Any],
    suspend: bool,
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": build_metadata(
            ctx.run, name, ctx.stage, ctx.attempt, labels=ctx.workload_labels
        ),
        "spec": {
            **spec,
            **deadline(ctx),
            "suspend": suspend,
            "template": build_pod_template(ctx, container, restart_policy="Never"),
        },
    }


def deadline(ctx: PodContext) -> dict[str, int]:
    """`activeDeadlineSeconds` when the spec sets one for the stage (Job and runPolicy)."""
    seconds = ctx.active_deadline_seconds
    return {"activeDeadlineSeconds": seconds} if seconds is not None else {}


def build_regen_job(ctx: PodContext, run_root: str, suspend: bool = False) -> dict[str, Any]:
    """Indexed Job: index i regenerates shard i; a committed shard is skipped by the stage."""
    regen = ctx.spec.regeneration
    name = child_name(ctx.run.name, Stage.REGEN, ctx.attempt or 1)
    container = build_container(
        ctx, "regenerate", commands.build_regenerate_args(ctx.spec, run_root)
    )
    spec = {
        "completionMode": "Indexed",
        "completions": regen.shards,
        "parallelism": regen.parallelism or regen.shards,
        "backoffLimitPerIndex": regen.retries_per_shard,
        "podFailurePolicy": {
            "rules": [
                # Bad input fails the same way on every retry: stop that index at once.
                _fail_on_exit_codes("FailIndex", [EXIT_BAD_INPUT]),
                _IGNORE_DISRUPTIONS,
            ]
        },
    }
    return _job(ctx, name, container, spec, suspend)


def build_model_job(
    ctx: PodContext, run_root: str, backoff_limit: int, suspend: bool = False
) -> dict[str, Any]:
    """One CPU pod copies the Hub target into the run root once (exit 2, e.g. a gated model
    without a token, is final); a retry skips the files already verified and copied."""
    name = child_name(ctx.run.name, Stage.MODEL, ctx.attempt or 1)
    container = build_container(ctx, "model", commands.build_model_fetch_args(ctx.spec, run_root))
    return _job(ctx, name, container, _single_pod_spec(backoff_limit, [EXIT_BAD_INPUT]), suspend)


def build_canary_job(
    ctx: PodContext, run_root: str, backoff_limit: int, suspend: bool = False
) -> dict[str, Any]:
    """One pod on the regeneration pool: the canary sample of every source (exit 2 is final)."""
    name = child_name(ctx.run.name, Stage.CANARY, ctx.attempt or 1)
    container = build_container(ctx, "canary", commands.build_canary_args(ctx.spec, run_root))
    return _job(ctx, name, container, _single_pod_spec(backoff_limit, [EXIT_BAD_INPUT]), suspend)


def build_score_job(
    ctx: PodContext, run_root: str, backoff_limit: int, suspend: bool = False
) -> dict[str, Any]:
    """One pod on the regeneration pool: imported completions copied into regen/, a sample of
    every source scored under the target (exit 2 is final)."""
    name = child_name(ctx.run.name, Stage.SCORE, ctx.attempt or 1)
    container = build_container(ctx, "score", commands.build_score_args(ctx.spec, run_root))
    return _job(ctx, name, container, _single_pod_spec(backoff_limit, [EXIT_BAD_INPUT]), suspend)


def _single_pod_spec(backoff_limit: int, fail_fast_codes: list[int]) -> dict[str, Any]:
    return {
        "completions": 1,
        "parallelism": 1,
        "backoffLimit": backoff_limit,
        "podFailurePolicy": {
            "rules": [_fail_on_exit_codes("FailJob", fail_fast_codes), _IGNORE_DISRUPTIONS]
        },
    }


def build_audit_job(
    ctx: PodContext, gate: Gate, run_root: str, backoff_limit: int, suspend: bool = False
) -> dict[str, Any]:
    """The gate's audit: exit 3 (gate failed) and 2 (bad input) are final, never retried."""
    name = child_name(ctx.run.name, ctx.stage, ctx.attempt or 1)
    container = build_container(ctx, "audit", commands.build_audit_args(ctx.spec, gate, run_root))
    spec = _single_pod_spec(backoff_limit, [EXIT_BAD_INPUT, EXIT_GATE_FAILED])
    return _job(ctx, name, container, spec, suspend)


def build_tokenize_job(
    ctx: PodContext, run_root: str, backoff_limit: int, suspend: bool = False
) -> dict[str, Any]:
    name = child_name(ctx.run.name, Stage.TOKENIZE, ctx.attempt or 1)
    container = build_container(ctx, "tokenize", commands.build_tokenize_args(ctx.spec, run_root))
    return _job(ctx, name, container, _single_pod_spec(backoff_limit, [EXIT_BAD_INPUT]), suspend)


def build_eval_job(
    ctx: PodContext, run_root: str, backoff_limit: int, suspend: bool = False
) -> dict[str, Any]:
    name = child_name(ctx.run.name, Stage.EVAL, ctx.attempt or 1)
    container = build_container(ctx, "evaluate", commands.build_evaluate_args(run_root))
    return _job(ctx, name, container, _single_pod_spec(backoff_limit, [EXIT_BAD_INPUT]), suspend)


def build_cleanup_job(
    ctx: PodContext, run_root: str, backoff_limit: int, policy: CleanupPolicy
) -> dict[str, Any]:
    """The S3 cleanup Job of a cleanupPolicy.

    Delete (`<run>-cleanup`, when the run is deleted): no ownerReference, because foreground
    deletion of the run would remove an owned Job at once; it removes itself a while after
    it finished instead. DeleteIntermediate (`<run>-prune`, after success): owned by the run
    like every other child.
    """
    stage = Stage.CLEANUP if policy == CleanupPolicy.DELETE else Stage.PRUNE
    name = child_name(ctx.run.name, stage)
    container = build_container(ctx, "cleanup", commands.build_cleanup_args(run_root, policy.value))
    spec = _single_pod_spec(backoff_limit, [EXIT_BAD_INPUT])
    if policy == CleanupPolicy.DELETE:
        spec["ttlSecondsAfterFinished"] = CLEANUP_JOB_TTL_SECONDS
    job = _job(ctx, name, container, spec, False)
    if policy == CleanupPolicy.DELETE:
        # Outlives its run: its run-uid label (every child has one) says whose root it deletes
        # (a run re-created under the same name must never take an earlier run's cleanup).
        del job["metadata"]["ownerReferences"]
    return job
