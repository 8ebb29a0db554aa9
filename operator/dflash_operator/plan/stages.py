"""The pipeline: which stages a run has, in order, what child kind each runs as, and the
manifest of a stage's child for one attempt (dispatching to the `children/` builders).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dflash_operator.api.constants import GATE_STAGES, KUEUE_QUEUE_LABEL, Gate, Stage
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.spec_storage import CleanupPolicy
from dflash_operator.api.spec_training import Launcher
from dflash_operator.children import jobs
from dflash_operator.children.commands import is_hub_model
from dflash_operator.children.kinds import JOB, ChildKind
from dflash_operator.children.launch import LaunchOptions
from dflash_operator.children.launchers import LAUNCHERS
from dflash_operator.children.meta import RunRef
from dflash_operator.children.pod import PodContext, PodSettings
from dflash_operator.children.rbac import trainer_account_name
from dflash_operator.config import (
    DEFAULT_REGEN_IMAGE,
    DEFAULT_STAGE_BACKOFF_LIMIT,
    DEFAULT_TRAINER_IMAGE,
    DEFAULT_TRAINING_RUNTIME,
)
from dflash_operator.plan.placement import Placement, PlacementError

STAGE_GATES: dict[Stage, Gate] = {stage: gate for gate, stage in GATE_STAGES.items()}
# Short stage names for the Pools column ("regen=b200 train=rtx-pro-6000").
POOL_COLUMN_NAMES: dict[Stage, str] = {
    Stage.REGEN: "regen",
    Stage.SCORE: "score",
    Stage.AUDIT_COMPLETIONS: "audit",
    Stage.TOKENIZE: "tokenize",
    Stage.TRAIN: "train",
    Stage.EVAL: "eval",
}


@dataclass(frozen=True)
class PlanSettings:
    """Operator-wide settings the planner needs (from `config.OperatorConfig`)."""

    regen_image: str = DEFAULT_REGEN_IMAGE
    trainer_image: str = DEFAULT_TRAINER_IMAGE
    stage_backoff_limit: int = DEFAULT_STAGE_BACKOFF_LIMIT
    pod: PodSettings = field(default_factory=PodSettings)
    # spec.training.launcher of runs that set none, and the TrainJobs' default runtime.
    default_launcher: Launcher = Launcher.AUTO
    training_runtime: str = DEFAULT_TRAINING_RUNTIME


@dataclass(frozen=True)
class StageContext:
    """One run, resolved: its identity, spec, S3 root and the placement of every stage."""

    run: RunRef
    spec: DFlashRunSpec
    run_root: str
    placements: dict[Stage, Placement]
    settings: PlanSettings
    # Stages that do not fit the pools as they are now (the pools changed after the run
    # started): each fails the run only when it is about to start.
    unplaced: dict[Stage, PlacementError] = field(default_factory=dict)
    # The training workload's launcher, resolved (plan/launcher.py), and why it cannot start
    # (None: it can): e.g. the cluster does not serve its API.
    launcher: Launcher = Launcher.PYTORCHJOB
    launcher_missing: str | None = None

    @property
    def runtime(self) -> str:
        """The ClusterTrainingRuntime of a TrainJob: spec.training.runtimeRef, else the chart's."""
        return self.spec.training.runtime_ref or self.settings.training_runtime


def build_pipeline(spec: DFlashRunSpec) -> tuple[Stage, ...]:
    """The stages of a run, in order: regeneration (with or without its canary) and
    evaluation can be switched off; a target named by its Hub id is first copied into the run
    root once (the model stage), so that no other pod downloads it."""
    stages = [Stage.AUDIT_COMPLETIONS, Stage.TOKENIZE, Stage.AUDIT_TOKENS, Stage.TRAIN]
    if spec.regeneration.enabled:
        stages.insert(0, Stage.REGEN)
        if spec.regeneration.canary.samples_per_source > 0:
            stages[0:0] = [Stage.CANARY, Stage.AUDIT_CANARY]
    else:  # imported completions: copied into the run, a sample scored under the target
        stages.insert(0, Stage.SCORE)
    if spec.evaluation.enabled:
        stages.append(Stage.EVAL)
    if is_hub_model(spec.target.model):
        stages.insert(0, Stage.MODEL)
    return tuple(stages)


def stage_kind(ctx: StageContext, stage: Stage) -> ChildKind:
    if stage == Stage.TRAIN:
        return LAUNCHERS[ctx.launcher].kind
    return JOB


def runtime_kind(launcher: Launcher) -> str | None:
    """The kind of runtime the launcher's workload references (None: none)."""
    return LAUNCHERS[launcher].runtime_kind


def stage_restarts(ctx: StageContext, stage: Stage) -> int:
    """Failed children of a stage the operator follows with a new attempt (0: the child
    retries by itself, as Jobs and PyTorchJobs do; a TrainJob's JobSet fails on the first
    pod failure and the operator spends spec.training.maxRestarts)."""
    if stage == Stage.TRAIN and not LAUNCHERS[ctx.launcher].restarts_in_place:
        return ctx.spec.training.max_restarts
    return 0


def stage_image(ctx: StageContext, stage: Stage) -> str:
    spec, settings = ctx.spec, ctx.settings
    if stage in (Stage.REGEN, Stage.CANARY, Stage.SCORE):
        return spec.regeneration.image or settings.regen_image
    if stage == Stage.TRAIN:
        return spec.training.image or settings.trainer_image
    if stage == Stage.EVAL:
        return spec.evaluation.image or settings.trainer_image
    return settings.trainer_image


def stage_retry_limit(ctx: StageContext, stage: Stage) -> int:
    """Retries of a stage's child before it fails (per shard for regeneration)."""
    if stage in (Stage.REGEN, Stage.CANARY, Stage.SCORE):
        return ctx.spec.regeneration.retries_per_shard
    if stage == Stage.TRAIN:
        return ctx.spec.training.max_restarts
    return ctx.settings.stage_backoff_limit


def stage_queue(ctx: StageContext, stage: Stage) -> str | None:
    """The Kueue LocalQueue of a stage's child (spec.queueName, else its pool's label)."""
    placement = ctx.placements.get(stage)
    if placement is None:
        return None
    return pod_context(ctx, stage, None).workload_labels.get(KUEUE_QUEUE_LABEL)


def pod_context(ctx: StageContext, stage: Stage, attempt: int | None) -> PodContext:
    extra_env: dict[str, str] = {}
    placement = ctx.placements[stage]
    # Stage pods never talk to the API server: an account only for a cloud identity (IRSA,
    # Workload Identity), no token mounted.
    service_account = ctx.spec.service_account_name or placement.pool.service_account_name
    mount_token = False
    if stage == Stage.TRAIN:
        # The trainer patches its own run's status (data-contracts section 6).
        extra_env = {"DFLASH_RUN_NAME": ctx.run.name, "DFLASH_RUN_NAMESPACE": ctx.run.namespace}
        service_account = trainer_account_name(ctx.run.name)
        mount_token = True
    return PodContext(
        run=ctx.run,
        spec=ctx.spec,
        stage=stage,
        attempt=attempt,
        placement=placement,
        image=stage_image(ctx, stage),
        settings=ctx.settings.pod,
        service_account=service_account,
        mount_token=mount_token,
        extra_env=extra_env,
    )


def build_stage_child(
    ctx: StageContext, stage: Stage, attempt: int, suspend: bool
) -> dict[str, Any]:
    """The manifest of `stage`'s child for `attempt` (named `<run>-<stage>[-<attempt>]`)."""
    pod = pod_context(ctx, stage, attempt)
    limit = ctx.settings.stage_backoff_limit
    if stage == Stage.REGEN:
        return jobs.build_regen_job(pod, ctx.run_root, suspend)
    if stage == Stage.MODEL:
        return jobs.build_model_job(pod, ctx.run_root, limit, suspend)
    if stage == Stage.CANARY:
        retries = ctx.spec.regeneration.retries_per_shard
        return jobs.build_canary_job(pod, ctx.run_root, retries, suspend)
    if stage == Stage.SCORE:
        retries = ctx.spec.regeneration.retries_per_shard
        return jobs.build_score_job(pod, ctx.run_root, retries, suspend)
    if stage in STAGE_GATES:
        return jobs.build_audit_job(pod, STAGE_GATES[stage], ctx.run_root, limit, suspend)
    if stage == Stage.TOKENIZE:
        return jobs.build_tokenize_job(pod, ctx.run_root, limit, suspend)
    if stage == Stage.TRAIN:
        options = LaunchOptions(ctx.spec.training.max_restarts, ctx.runtime)
        return LAUNCHERS[ctx.launcher].build(pod, ctx.run_root, options, suspend)
    if stage == Stage.EVAL:
        return jobs.build_eval_job(pod, ctx.run_root, limit, suspend)
    raise ValueError(f"stage {stage.value!r} has no pipeline child")


def build_cleanup_child(ctx: StageContext, policy: CleanupPolicy) -> dict[str, Any]:
    """The S3 cleanup Job: `<run>-cleanup` under the finalizer when a run with cleanupPolicy
    Delete goes; `<run>-prune` after success with cleanupPolicy DeleteIntermediate."""
    stage = Stage.CLEANUP if policy == CleanupPolicy.DELETE else Stage.PRUNE
    pod = pod_context(ctx, stage, None)
    return jobs.build_cleanup_job(pod, ctx.run_root, ctx.settings.stage_backoff_limit, policy)
