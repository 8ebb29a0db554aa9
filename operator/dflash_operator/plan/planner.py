"""The one pure function that decides: `plan(run, observed children, pools, settings, now)`
-> actions, new status and events. Level-triggered: the same inputs give the same plan, and
a plan already carried out asks for nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from dflash_operator.api.annotations import AuditApproval
from dflash_operator.api.constants import (
    STAGE_CONDITIONS,
    STAGE_PHASES,
    ConditionStatus,
    ConditionType,
    Gate,
    Phase,
    Reason,
    Stage,
)
from dflash_operator.api.naming import MAX_ATTEMPT, check_run_name, child_name
from dflash_operator.api.resource import RunMetadata
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.status import DFlashRunStatus, format_audit_verdict, format_node_pools
from dflash_operator.api.validation import SpecError, parse_spec
from dflash_operator.children.config_map import build_config_map
from dflash_operator.children.kinds import WORKLOAD_KINDS
from dflash_operator.children.meta import (
    ANNOTATION_CONFIG_HASH,
    ANNOTATION_FAILURE_RESTARTS,
    ANNOTATION_SPEC_INPUTS,
    RunRef,
    build_run_root,
)
from dflash_operator.children.rbac import build_trainer_access
from dflash_operator.plan import gpu_hours, outcomes, references
from dflash_operator.plan.actions import (
    ApplyConfig,
    CreateChild,
    DeleteChild,
    Plan,
    SetDeadline,
    SetSuspend,
    SetWorkloadActive,
)
from dflash_operator.plan.budget import budget_message, budget_of, sync_budget_condition
from dflash_operator.plan.create_failures import report_create_failure
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.launcher import choose_launcher
from dflash_operator.plan.length_check import warn_untrainable_generation
from dflash_operator.plan.lifetime import (
    expire_children,
    past_run_deadline,
    requeue_at_run_deadline,
    stop_running_children,
)
from dflash_operator.plan.memory_check import admit_training_memory
from dflash_operator.plan.observed import POD_DONE_PHASES, ChildView, Observed
from dflash_operator.plan.placement import PlacementError, place_stage, place_stages
from dflash_operator.plan.prune import prune_after_success
from dflash_operator.plan.requests import (
    find_approval,
    parse_approvals,
    parse_retry,
)
from dflash_operator.plan.result_checks import record_finished
from dflash_operator.plan.retry import apply_retry
from dflash_operator.plan.stage_inputs import (
    changed_inputs,
    format_inputs,
    kept_on_restart,
    stage_inputs,
)
from dflash_operator.plan.stages import (
    POOL_COLUMN_NAMES,
    STAGE_GATES,
    PlanSettings,
    StageContext,
    build_pipeline,
    build_stage_child,
    stage_kind,
    stage_queue,
    stage_restarts,
)
from dflash_operator.plan.state import StageState, stage_state
from dflash_operator.plan.training_audit import record_training_audit
from dflash_operator.pools import PoolsConfig

# A child that is still being deleted blocks its name; look again shortly.
DELETING_RECHECK_SECONDS = 2.0
# Training waits for its API (discovery is cached for about as long).
API_MISSING_RECHECK_SECONDS = 30.0


@dataclass(frozen=True)
class PlanInput:
    """Everything the planner reads: the run as the API server returned it, and the rest."""

    body: Mapping[str, Any]
    observed: Observed
    pools: PoolsConfig
    settings: PlanSettings
    now: datetime


class UnreadableStatusError(Exception):
    """The stored status does not parse: written by a newer operator (an enum value this one
    does not know), or edited by hand. Never taken for an empty status: that would start a
    finished pipeline again, on GPUs."""


def parse_status(raw: Any) -> DFlashRunStatus:
    """The stored status; UnreadableStatusError names the first field this version cannot read."""
    try:
        return DFlashRunStatus.model_validate(raw or {})
    except ValidationError as error:
        item = error.errors(include_url=False)[0]
        where = "status." + ".".join(str(part) for part in item["loc"])
        raise UnreadableStatusError(
            f"{where}={item.get('input')!r} is not readable by this operator: {item['msg']}"
        ) from None


def plan(inp: PlanInput) -> Plan:
    """The next step of one run (see the module docstring)."""
    meta = RunMetadata.model_validate(inp.body.get("metadata") or {})
    run = RunRef(meta.name, meta.namespace or "default", meta.uid or "")
    draft = Draft(
        parse_status(inp.body.get("status")), generation=meta.generation or 0, now=inp.now
    )
    observed = inp.observed.owned_by(meta.uid)
    used = gpu_hours.account(draft, observed)
    retry, retry_problem = parse_retry(meta.annotations, draft.status.retry_token)
    spec, problem = _parse_spec(inp.body.get("spec"), meta.name)
    budget, budget_problem = budget_of(spec, meta.annotations) if spec else (None, None)
    over_budget = budget is not None and used >= budget
    if spec is not None and over_budget and not spec.suspend:
        # Out of GPU-hours: the run behaves as suspended (children stopped, output kept).
        spec = spec.model_copy(update={"suspend": True})

    if draft.status.phase == Phase.SUCCEEDED or (
        draft.status.phase == Phase.FAILED and retry is None
    ):
        if retry is not None:
            draft.status.retry_token = retry.token
            draft.event(
                Reason.RETRY_REQUESTED, f"Retry {retry.token!r} ignored: the run already succeeded"
            )
        if draft.status.phase == Phase.FAILED:
            stop_running_children(draft, observed)
        if spec is not None:
            if draft.status.phase == Phase.SUCCEEDED:
                prune_after_success(run, spec, draft, observed, inp.pools, inp.settings)
            expire_children(spec, draft, observed)
        return draft.finish()
    if retry is not None:
        draft.status.retry_token = retry.token
    first_pass = draft.status.phase is None
    if first_pass:
        draft.set_phase(Phase.PENDING, Reason.PENDING.message())
    if spec is None:
        outcomes.fail_run(draft, Reason.INVALID_SPEC, problem or "the spec is invalid")
        return draft.finish()

    stages = build_pipeline(spec)
    placements, errors = place_stages(spec, stages, inp.pools)
    if errors and draft.status.start_time is None:
        # Nothing started yet: say every reason at once, before any GPU is used.
        outcomes.fail_run(draft, errors[0].reason, "; ".join(e.message for e in errors))
        return draft.finish()
    if not admit_training_memory(spec, placements, draft, first_pass):
        return draft.finish()
    if first_pass:
        warn_untrainable_generation(spec, draft)
    # Started: a pools change never fails what runs; a stage that no longer fits fails the run
    # when it is about to start (`_step`).
    unplaced = {s: place_stage(spec, s, inp.pools) for s in stages if s not in placements}
    choice = choose_launcher(spec, draft.status, observed, inp.settings.default_launcher)
    ctx = StageContext(
        run, spec, build_run_root(spec.storage, run), placements, inp.settings,
        unplaced={s: e for s, e in unplaced.items() if isinstance(e, PlacementError)},
        launcher=choice.launcher, launcher_missing=choice.missing,
    )  # fmt: skip
    _initial_conditions(draft, stages)
    if not spec.regeneration.enabled:
        why = "regeneration.enabled is false: the sources are regenerated completions"
        _skip(draft, Stage.REGEN, why)
        for stage in (Stage.CANARY, Stage.AUDIT_CANARY):  # one event for all three
            _skip(draft, stage, why, announce=False)
    elif spec.regeneration.canary.samples_per_source == 0:
        for stage in (Stage.CANARY, Stage.AUDIT_CANARY):
            _skip(draft, stage, "regeneration.canary.samplesPerSource is 0", announce=False)
    for child in observed.children:
        if not child.deleting and child.stage is not None:
            draft.record_child(child)
    _stop_dropped_stages(draft, observed, stages)
    if retry is not None:
        apply_retry(ctx, draft, retry, stages, observed)
    if past_run_deadline(spec, draft):
        stop_running_children(draft, observed)
        return draft.finish()
    approvals, approval_problems = parse_approvals(meta.annotations)
    current = _walk(ctx, draft, stages, observed, approvals)
    if draft.status.phase == Phase.FAILED:
        stop_running_children(draft, observed)
    requeue_at_run_deadline(spec, draft)
    if current is None:  # every stage is done: the run succeeded in this pass
        prune_after_success(run, spec, draft, observed, inp.pools, inp.settings)
    ignored = [*approval_problems, *([retry_problem] if retry_problem else [])]
    if ignored and draft.status.phase in (Phase.AUDIT_FAILED, Phase.FAILED):
        draft.status.message = f"{draft.status.message}; ignored: {'; '.join(ignored)}"
    over_message = budget_message(used, budget, over_budget, current, run)
    if over_message and budget_problem:
        over_message += f"; {budget_problem}"
    _sync_suspension(ctx, draft, current, over_message)
    if budget is not None:
        sync_budget_condition(draft, budget, over_message, budget_problem)
    if current is not None:
        condition = draft.condition(STAGE_CONDITIONS[current])
        draft.edit_pending = condition is not None and condition.reason == Reason.SPEC_CHANGED
    draft.status.node_pools = format_node_pools(
        {
            POOL_COLUMN_NAMES[s]: placements[s].pool_name
            for s in stages
            if s in POOL_COLUMN_NAMES and s in placements
        }
    )
    draft.status.audit_verdict = format_audit_verdict(draft.status.audit)
    return draft.finish()


def _parse_spec(raw: Any, name: str) -> tuple[DFlashRunSpec | None, str | None]:
    name_problem = check_run_name(name)
    try:
        spec = parse_spec(raw)
    except SpecError as error:
        return None, "; ".join(([name_problem] if name_problem else []) + error.problems)
    return (None, name_problem) if name_problem else (spec, None)


def _initial_conditions(draft: Draft, stages: tuple[Stage, ...]) -> None:
    if draft.condition(ConditionType.SUSPENDED) is None:
        draft.set_condition(
            ConditionType.SUSPENDED, ConditionStatus.FALSE, Reason.NOT_SUSPENDED,
            Reason.NOT_SUSPENDED.message(), announce=False,
        )  # fmt: skip
    if draft.condition(ConditionType.DATA_AUDIT_PASSED) is None:
        first_gate = next(STAGE_GATES[s] for s in stages if s in STAGE_GATES)
        draft.set_condition(
            ConditionType.DATA_AUDIT_PASSED, ConditionStatus.UNKNOWN, Reason.AUDIT_PENDING,
            Reason.AUDIT_PENDING.message(gate=first_gate.value), announce=False,
        )  # fmt: skip


def _walk(
    ctx: StageContext,
    draft: Draft,
    stages: tuple[Stage, ...],
    observed: Observed,
    approvals: list[AuditApproval],
) -> Stage | None:
    """Advance through the stages; returns the stage the run is in (None once all are done)."""
    for stage in stages:
        state = stage_state(draft, stage)
        stepped = state in (StageState.PENDING, StageState.RUNNING)
        if stepped and not _step(ctx, draft, stage, state, observed):
            state = stage_state(draft, stage)
            if state != StageState.BLOCKED:
                return stage
        if state == StageState.BLOCKED and not _approve(ctx, draft, stage, approvals):
            return stage
        if state == StageState.FAILED:
            condition = draft.condition(STAGE_CONDITIONS[stage])
            reason = Reason(condition.reason) if condition else Reason.STAGE_FAILED
            outcomes.fail_run(draft, reason, condition.message if condition else stage.value)
            return stage
    _succeed(draft, ctx.spec.evaluation.enabled)
    return None


def _skip(draft: Draft, stage: Stage, why: str, announce: bool = True) -> None:
    condition = draft.condition(STAGE_CONDITIONS[stage])
    if condition is None or condition.reason != Reason.STAGE_SKIPPED.value:
        message = Reason.STAGE_SKIPPED.message(stage=stage.value, why=why)
        draft.set_condition(
            STAGE_CONDITIONS[stage], ConditionStatus.TRUE, Reason.STAGE_SKIPPED, message,
            announce=announce,
        )  # fmt: skip


def _approve(ctx: StageContext, draft: Draft, stage: Stage, approvals: list[AuditApproval]) -> bool:
    gate = STAGE_GATES.get(stage, Gate.TRAINING)  # a stage blocked by its own monitor
    result = draft.status.audit.result(gate) if draft.status.audit else None
    if result is None:
        return False
    if not gate.approvable or find_approval(approvals, gate, result.observed_generation) is None:
        draft.set_phase(Phase.AUDIT_FAILED)
        return False
    outcomes.approve_gate(ctx, draft, gate, result)
    return True


def _step(
    ctx: StageContext, draft: Draft, stage: Stage, state: StageState, observed: Observed
) -> bool:
    """Move the current stage on; True when it finished successfully in this pass."""
    child_kind = stage_kind(ctx, stage)
    kind = child_kind.kind
    attempt = max(draft.attempt(stage) + (1 if state == StageState.PENDING else 0), 1)
    if attempt > MAX_ATTEMPT:
        outcomes.fail_run(
            draft, Reason.STAGE_FAILED,
            Reason.STAGE_FAILED.message(stage=stage.value, attempt=attempt - 1,
                                        error=f"no attempts left (at most {MAX_ATTEMPT})"),
        )  # fmt: skip
        return False
    name = child_name(ctx.run.name, stage, attempt)
    child = observed.child(kind, name)
    if child and stage == Stage.TRAIN and record_training_audit(draft, attempt, child, observed):
        return False  # the likelihood monitor stopped training (plan/training_audit.py)
    if (
        child is not None
        and not child.finished.done
        and _restart_if_edited(ctx, draft, stage, child)
    ):
        return False
    if child is None or child.deleting:
        if child is not None:
            draft.requeue(DELETING_RECHECK_SECONDS)
            draft.set_phase(STAGE_PHASES[stage], f"waiting for the old {kind} {name} to be deleted")
            return False
        unplaced = ctx.unplaced.get(stage)
        if unplaced is not None:
            message = f"{stage.value} cannot start: {unplaced.message} (the node pools changed "
            message += "after the run started; stages that ran kept their pools)"
            outcomes.fail_run(draft, unplaced.reason, message)
            return False
        _start(ctx, draft, stage, attempt, kind, name, observed)
        return False
    draft.set_attempt(stage, attempt)
    if draft.status.start_time is None:
        draft.status.start_time = draft.now
    if stage == Stage.TRAIN:
        draft.status.launcher = ctx.launcher  # adopted: recorded, never changed
    pods = observed.pods_of(child)
    if not child.finished.done:
        if stage == Stage.TRAIN:
            # Adopted after a crash: make sure (and record) that its identity exists too.
            _ensure_trainer_access(ctx, draft, observed)
        _sync_child_suspension(ctx, draft, stage, child, observed)
        deadline = ctx.spec.section_of(stage)
        seconds = getattr(deadline, "active_deadline_seconds", None)
        if child.active_deadline_seconds != seconds and child_kind.deadline_mutable:
            draft.act(SetDeadline(kind, name, seconds))
        references.mark_unfinished(ctx, draft, stage, attempt, child, observed)
        return False
    if not child.finished.ok and _restart_failed(ctx, draft, stage, child, observed):
        return False
    return record_finished(ctx, draft, stage, attempt, child, pods)


def _restart_failed(
    ctx: StageContext, draft: Draft, stage: Stage, child: ChildView, observed: Observed
) -> bool:
    """A failed child of a kind that does not restart itself is followed by the next attempt
    (resuming from the newest checkpoint) while the stage's restarts last. True when it is."""
    limit = stage_restarts(ctx, stage)
    restart = child.failure_restarts + 1
    if restart > limit or child.attempt >= MAX_ATTEMPT or child.finished.final:
        return False
    next_attempt = child.attempt + 1
    message = Reason.WORKLOAD_RESTARTED.message(
        kind=child.kind, name=child.name, error=child.finished.message, stage=stage.value,
        attempt=next_attempt, restart=restart, limit=limit,
    )  # fmt: skip
    draft.set_condition(
        STAGE_CONDITIONS[stage], ConditionStatus.FALSE, Reason.WORKLOAD_RESTARTED, message
    )
    next_name = child_name(ctx.run.name, stage, next_attempt)
    if observed.child(child.kind, next_name) is None:
        _start(ctx, draft, stage, next_attempt, child.kind, next_name, observed, restart)
    else:  # created by this very pass: the next reconcile follows it
        draft.set_attempt(stage, next_attempt)
    return True


def _start(
    ctx: StageContext,
    draft: Draft,
    stage: Stage,
    attempt: int,
    kind: str,
    name: str,
    observed: Observed,
    failure_restarts: int = 0,
) -> None:
    """Create the stage's child (after its config and, for training, its identity);
    `failure_restarts`: the restarts after failures it continues (annotated on it)."""
    earlier = [
        pod for pod in observed.pods
        if pod.stage == stage and pod.attempt <= attempt and pod.phase not in POD_DONE_PHASES
    ]  # fmt: skip
    if earlier:
        # A new attempt writes where the earlier one did (the stage's S3 prefix): it starts
        # only once every pod of the earlier attempts (and of a deleted child of this very
        # attempt: its Job is gone, its pods may still run) has stopped, never beside one.
        names = ", ".join(sorted(pod.name for pod in earlier)[:3])
        draft.set_phase(
            STAGE_PHASES[stage],
            f"waiting for {len(earlier)} pod(s) of an earlier attempt to stop ({names}) before "
            f"attempt {attempt} of {stage.value} starts",
        )
        draft.requeue(DELETING_RECHECK_SECONDS)
        return
    if stage == Stage.TRAIN and ctx.launcher_missing:
        message = Reason.TRAINING_API_MISSING.message(
            stage=stage.value, problem=ctx.launcher_missing
        )
        draft.set_condition(
            STAGE_CONDITIONS[stage], ConditionStatus.FALSE, Reason.TRAINING_API_MISSING, message
        )
        draft.set_phase(STAGE_PHASES[stage], message)
        draft.requeue(API_MISSING_RECHECK_SECONDS)
        return
    config = _config_map(ctx, draft)
    access = _trainer_access(ctx) if stage == Stage.TRAIN else []
    wanted = [("ConfigMap", config["metadata"]["name"])]
    wanted += [(m["kind"], m["metadata"]["name"]) for m in access] + [(kind, name)]
    for failed_kind, failed_name in wanted:
        failure = observed.failure(failed_kind, failed_name)
        if failure is not None and failure.missing:
            references.mark_missing(draft, stage, failure.missing, ctx.run.namespace)
            return
        if failure is not None:
            report_create_failure(draft, stage, failure)
            return
    draft.set_phase(STAGE_PHASES[stage], f"creating {kind} {name}")
    if ctx.spec.suspend:
        return
    current_config = observed.child("ConfigMap", config["metadata"]["name"])
    wanted_hash = config["metadata"]["annotations"][ANNOTATION_CONFIG_HASH]
    if current_config is None or current_config.config_hash != wanted_hash:
        draft.act(ApplyConfig(config))
    if stage == Stage.TRAIN:
        _ensure_trainer_access(ctx, draft, observed)
        draft.status.launcher = ctx.launcher  # decided: the run trains with it to the end
    # A queued child starts suspended: Kueue admits it (all pods at once) when quota allows.
    queued = stage_queue(ctx, stage) is not None
    manifest = build_stage_child(ctx, stage, attempt, suspend=queued)
    inputs = stage_inputs(ctx.spec, stage, config["data"])
    annotations = manifest["metadata"].setdefault("annotations", {})
    annotations[ANNOTATION_SPEC_INPUTS] = format_inputs(inputs)
    if failure_restarts:
        annotations[ANNOTATION_FAILURE_RESTARTS] = str(failure_restarts)
    requires = references.build_references(ctx, stage)
    draft.act(CreateChild(manifest, stage, attempt, requires=requires))


def _config_map(ctx: StageContext, draft: Draft) -> dict[str, Any]:
    """`<run>-config` as the spec renders it now."""
    eval_placement = ctx.placements.get(Stage.EVAL)
    on_gpus = eval_placement is not None and eval_placement.gpus > 0
    stages_status = draft.status.stages
    tokenized = stages_status.tokenization if stages_status else None
    samples = tokenized.samples if tokenized else None
    return build_config_map(ctx.run, ctx.spec, ctx.run_root, eval_on_gpus=on_gpus, samples=samples)


def _restart_if_edited(ctx: StageContext, draft: Draft, stage: Stage, child: ChildView) -> bool:
    """An edit reaches a running stage: when what its child was rendered from changed, the
    child is deleted and the stage starts again as the next attempt (resuming from what it
    committed), once the old pods stopped. True when it does. A suspended run restarts
    nothing (the edit applies when it resumes); children of an older operator have no record
    and are left alone."""
    if ctx.spec.suspend or child.spec_inputs is None:
        return False
    config = _config_map(ctx, draft)
    changed = changed_inputs(child.spec_inputs, stage_inputs(ctx.spec, stage, config["data"]))
    if not changed:
        return False
    if not child.deleting:
        draft.act(DeleteChild(child.kind, child.name))
    message = Reason.SPEC_CHANGED.message(
        stage=stage.value, attempt=child.attempt + 1, fields=", ".join(changed),
        generation=draft.generation, kept=kept_on_restart(stage),
    )  # fmt: skip
    draft.set_attempt(stage, child.attempt)
    draft.set_condition(
        STAGE_CONDITIONS[stage], ConditionStatus.FALSE, Reason.SPEC_CHANGED, message
    )
    draft.set_phase(STAGE_PHASES[stage], message)
    draft.requeue(DELETING_RECHECK_SECONDS)
    return True


def _stop_dropped_stages(draft: Draft, observed: Observed, stages: tuple[Stage, ...]) -> None:
    """An edit that removes a stage (regeneration.enabled, evaluation.enabled, the canary's
    samplesPerSource set to 0) stops that stage's running child."""
    for child in observed.children:
        pipeline = child.stage in STAGE_CONDITIONS and child.kind in WORKLOAD_KINDS
        running = not child.finished.done and not child.deleting
        if pipeline and running and child.stage not in stages:
            draft.act(DeleteChild(child.kind, child.name))


def _sync_child_suspension(
    ctx: StageContext, draft: Draft, stage: Stage, child: ChildView, observed: Observed
) -> None:
    """spec.suspend onto a running child, never against Kueue.

    Without a queue, `suspend` follows spec.suspend both ways. A queued child's `suspend`
    belongs to Kueue (it resumes an admitted child whatever anyone else set), so spec.suspend
    deactivates its Workload instead (Kueue stops the child and keeps it queued until the
    Workload is active again), and the operator never writes the child's `suspend` at all.
    """
    if not child.queue:
        if child.suspended != ctx.spec.suspend:
            draft.act(SetSuspend(child.kind, child.name, ctx.spec.suspend))
        return
    workload = observed.workload_of(child)
    if workload is not None and workload.active == ctx.spec.suspend:
        draft.act(SetWorkloadActive(workload.name, not ctx.spec.suspend))


def _ensure_trainer_access(ctx: StageContext, draft: Draft, observed: Observed) -> None:
    """Create (or adopt, and so record) the trainer's ServiceAccount, Role and RoleBinding."""
    for manifest in _trainer_access(ctx):
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        if draft.recorded(kind, name) is None and observed.child(kind, name) is None:
            draft.act(CreateChild(manifest, Stage.TRAIN))


def _trainer_access(ctx: StageContext) -> list[dict[str, Any]]:
    return build_trainer_access(ctx.run, ctx.spec.training.service_account_annotations)


def _succeed(draft: Draft, evaluated: bool) -> None:
    acceptance = draft.status.acceptance_length
    if acceptance is not None:
        shown = f"{acceptance:.2f}"
    else:
        shown = (
            "not in the evaluation result" if evaluated else "not measured (evaluation disabled)"
        )
    message = Reason.SUCCEEDED.message(
        drafter_uri=draft.status.drafter_uri or "?", acceptance_length=shown
    )
    draft.set_condition(ConditionType.SUCCEEDED, ConditionStatus.TRUE, Reason.SUCCEEDED, message)
    draft.set_phase(Phase.SUCCEEDED, message)
    draft.status.completion_time = draft.now
    draft.status.progress = f"acceptance {acceptance:.2f}" if acceptance is not None else "done"


def _sync_suspension(
    ctx: StageContext, draft: Draft, current: Stage | None, budget_message: str | None = None
) -> None:
    """The Suspended condition and phase: spec.suspend, or a GPU-hour budget that ran out."""
    if draft.status.phase is not None and draft.status.phase.is_terminal():
        return
    label = current.value if current else "the run"
    condition = draft.condition(ConditionType.SUSPENDED)
    if ctx.spec.suspend:
        reason = Reason.BUDGET_EXCEEDED if budget_message else Reason.SUSPENDED
        message = budget_message or Reason.SUSPENDED.message(stage=label)
        draft.set_condition(ConditionType.SUSPENDED, ConditionStatus.TRUE, reason, message)
        draft.set_phase(Phase.SUSPENDED, message)
    elif condition is not None and condition.status == ConditionStatus.TRUE:
        draft.set_condition(
            ConditionType.SUSPENDED, ConditionStatus.FALSE, Reason.RESUMED,
            Reason.RESUMED.message(stage=label),
        )  # fmt: skip
        checkpoint = draft.status.checkpoint
        if current == Stage.TRAIN and checkpoint is not None and checkpoint.uri:
            draft.event(
                Reason.TRAINING_RESUMED,
                Reason.TRAINING_RESUMED.message(uri=checkpoint.uri, step=checkpoint.step),
            )
