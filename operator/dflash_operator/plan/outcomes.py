"""What a stage's child means for the run: progress while it runs, results and conditions when
it succeeds, Failed or AuditFailed when it does not. Works on a `Draft`; pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from dflash_operator.api.constants import (
    GATE_STAGES,
    STAGE_CONDITIONS,
    STAGE_PHASES,
    ConditionStatus,
    ConditionType,
    Gate,
    Phase,
    Reason,
    Stage,
    Verdict,
)
from dflash_operator.api.status import format_bytes, format_count, format_progress
from dflash_operator.api.status_parts import (
    Approval,
    AuditResult,
    AuditStatus,
    AuditViolation,
    StageProgress,
)
from dflash_operator.children.commands import model_uri
from dflash_operator.plan import results, savings
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import ChildView, PodView, WorkloadView
from dflash_operator.plan.stages import STAGE_GATES, StageContext, stage_retry_limit

# Violations listed in a condition message; the full list is in status.audit and the report.
MAX_LISTED_VIOLATIONS = 8
_RATE_SUFFIXES = ("Rate", "Share", "Fraction", "_rate", "_share", "_fraction")
# Separates the last pod failure from the rest of a running stage's condition message.
LAST_FAILURE_MARK = "; last failure: "


def _stages(draft: Draft) -> StageProgress:
    if draft.status.stages is None:
        draft.status.stages = StageProgress()
    return draft.status.stages


def _number(check: str, value: float | None) -> str:
    if value is None:
        return "?"
    if check.endswith(_RATE_SUFFIXES):
        return f"{value * 100:.3g}%"
    return f"{value:.4g}"


def describe_violation(violation: AuditViolation) -> str:
    """The stage's own words ('stub_rate: 87.1% of samples are stubs (above the limit 5.0%)')
    else 'stub_rate: 87.1% > 5%', followed by the spec.audit field that sets the limit."""
    field = violation.threshold_field
    if violation.message:
        text = violation.message
    else:
        bound = (field or violation.check).rsplit(".", 1)[-1]
        comparator = "<" if bound.startswith("min") else ">"
        value = _number(bound, violation.value)
        threshold = _number(bound, violation.threshold)
        text = f"{violation.check}: {value} {comparator} {threshold}"
    return f"{text} [{field}]" if field else text


def describe_violations(result: AuditResult) -> str:
    listed = [describe_violation(v) for v in (result.violations or ())]
    if not listed:
        return "no details in the stage result (see the report)"
    extra = len(listed) - MAX_LISTED_VIOLATIONS
    shown = "; ".join(listed[:MAX_LISTED_VIOLATIONS])
    return shown + (f"; and {extra} more" if extra > 0 else "")


def set_audit(draft: Draft, gate: Gate, result: AuditResult | None) -> None:
    audit = draft.status.audit or AuditStatus()
    draft.status.audit = audit.model_copy(update={gate.value: result})


def clear_audit(draft: Draft, gate: Gate) -> None:
    """Forget a gate's result before it runs again."""
    if draft.status.audit is not None:
        set_audit(draft, gate, None)


def running_progress(
    ctx: StageContext, draft: Draft, stage: Stage, child: ChildView, pods: Sequence[PodView]
) -> tuple[str, str]:
    """(Progress column, words) for a running stage."""
    if stage == Stage.REGEN:
        summary = results.summarize_regeneration(pods, ctx.spec.regeneration.shards)
        done = max(summary.shards_done or 0, child.succeeded)
        summary = summary.model_copy(update={"shards_done": done})
        _stages(draft).regeneration = summary
        words = f"{done}/{summary.shards_total} shards committed, {format_count(summary.samples or 0)} samples"
        return format_progress("regen", done, summary.shards_total, exact=True), words
    if stage == Stage.MODEL:
        target = ctx.spec.target
        at = f"@{target.revision}" if target.revision else ""
        return "model", f"copying {target.model}{at} into {model_uri(ctx.spec, ctx.run_root)}"
    if stage == Stage.CANARY:
        per_source = ctx.spec.regeneration.canary.samples_per_source
        return "canary", f"regenerating {per_source} samples of every source"
    if stage == Stage.SCORE:
        per_source = ctx.spec.audit.likelihood.samples_per_source
        return "score", f"importing the completions, scoring {per_source} rows of every source"
    if stage == Stage.TRAIN:
        training = draft.status.training
        restarts = sum(pod.restarts for pod in pods)
        if training is None or training.step is None:
            words = "waiting for the trainer's first progress report"
            progress = "train"
        else:
            progress = format_progress("train", training.step, training.total_steps, exact=True)
            words = f"step {training.step}/{training.total_steps or '?'}"
            if training.loss is not None:
                words += f", loss {training.loss:.4g}"
        if restarts:
            words += f"; {restarts} restarts so far"
        # Kept in the condition: the crashed pod may be gone when the job finally fails.
        failure = results.describe_failure(pods, "") or _recorded_failure(draft, stage)
        if failure:
            words += f"{LAST_FAILURE_MARK}{failure}"
        return progress, words
    if stage in STAGE_GATES:
        gate = STAGE_GATES[stage]
        return f"audit {gate.value}", f"auditing the {gate.value}"
    return stage.value, f"{child.active} pod(s) active"


def mark_running(
    ctx: StageContext,
    draft: Draft,
    stage: Stage,
    attempt: int,
    child: ChildView,
    pods: Sequence[PodView],
) -> None:
    progress, words = running_progress(ctx, draft, stage, child, pods)
    if child.suspended:
        words = ("queued; " if child.queue else "suspended; ") + words
    message = Reason.STAGE_RUNNING.message(stage=stage.value, attempt=attempt, progress=words)
    draft.set_condition(
        STAGE_CONDITIONS[stage], ConditionStatus.FALSE, Reason.STAGE_RUNNING, message
    )
    draft.status.progress = progress
    draft.set_phase(STAGE_PHASES[stage], message)


# While a child waits in a Kueue queue, its Workload is read again this often (one list).
QUEUE_RECHECK_SECONDS = 10.0


def mark_queue(
    draft: Draft,
    stage: Stage,
    child: ChildView,
    workload: WorkloadView | None,
    not_served: str | None = None,
) -> None:
    """The Admitted condition of a queued child, in Kueue's own words: which ClusterQueue
    admitted it, or why it waits (the quota that is short, or Kueue's API not served). Shown
    in the phase message and the Progress column while it waits."""
    if not child.suspended:
        if workload is not None and workload.admitted:
            message = Reason.ADMITTED.message(
                stage=stage.value, cluster_queue=workload.cluster_queue or "?"
            )
            draft.set_condition(
                ConditionType.ADMITTED, ConditionStatus.TRUE, Reason.ADMITTED, message
            )
        return
    if workload is None and not_served:
        why = not_served
    elif workload is None:
        why = (
            f"Kueue has made no Workload for {child.kind} {child.name} yet: it may not be "
            f"running, not manage {child.kind}s in this namespace, or be unable to build one "
            "(its log says why)"
        )
    elif not workload.active:
        why = "its Workload is deactivated (spec.suspend)"
    else:
        why = workload.evicted or workload.message or "pending"
        if not_served:  # Kueue's words ("LocalQueue q doesn't exist") follow from it
            why = f"{not_served}; Kueue says: {why}"
    message = Reason.QUEUED.message(stage=stage.value, queue=child.queue, why=why)
    # The first reconcile after creation usually comes before Kueue's Workload: shown, but
    # announced (an event) only once Kueue has said why the child waits.
    draft.set_condition(
        ConditionType.ADMITTED, ConditionStatus.FALSE, Reason.QUEUED, message,
        announce=workload is not None or not_served is not None,
    )  # fmt: skip
    if workload is None or workload.active:
        draft.status.progress = f"{stage.value} queued"
        draft.set_phase(STAGE_PHASES[stage], message)
        # Kueue's Workloads are not watched: look again soon for its admission or new words.
        draft.requeue(QUEUE_RECHECK_SECONDS)


def fail_run(draft: Draft, reason: Reason, message: str) -> None:
    """Terminal: the Failed condition, phase and completion time; one Warning event."""
    draft.set_condition(ConditionType.FAILED, ConditionStatus.TRUE, reason, message)
    draft.set_phase(Phase.FAILED, message)
    draft.status.completion_time = draft.now


def record_success(
    ctx: StageContext,
    draft: Draft,
    stage: Stage,
    attempt: int,
    child: ChildView,
    pods: Sequence[PodView],
) -> bool:
    """Results of a succeeded child into status; False if a gate stopped the run."""
    if stage in STAGE_GATES:
        return record_audit(ctx, draft, stage, attempt, child, pods)
    summary = "done"
    if stage == Stage.REGEN:
        regen = results.summarize_regeneration(pods, ctx.spec.regeneration.shards)
        regen = regen.model_copy(
            update={"shards_done": max(regen.shards_done or 0, child.succeeded)}
        )
        _stages(draft).regeneration = regen
        summary = (
            f"{regen.shards_done}/{regen.shards_total} shards, {format_count(regen.samples or 0)} "
            f"samples, {format_count(regen.output_tokens or 0)} output tokens "
            f"({regen.shards_skipped or 0} shards already committed)"
        )
    elif stage == Stage.MODEL:
        copy = results.summarize_model_copy(pods, model_uri(ctx.spec, ctx.run_root))
        _stages(draft).model = copy
        summary = (
            f"{ctx.spec.target.model} at commit {copy.revision or '?'}: {copy.files or 0} files, "
            f"{format_bytes(copy.bytes or 0)} verified in {copy.uri} "
            f"({format_bytes(copy.fetched_bytes or 0)} downloaded by this attempt)"
        )
    elif stage == Stage.CANARY:
        canary = results.summarize_canary(pods)
        _stages(draft).canary = canary
        summary = (
            f"{format_count(canary.samples or 0)} canary samples, "
            f"{format_count(canary.output_tokens or 0)} output tokens (kept: the shards reuse them)"
        )
    elif stage == Stage.SCORE:
        summary = results.describe_scoring(pods)
    elif stage == Stage.TOKENIZE:
        tok = results.summarize_tokenization(pods)
        _stages(draft).tokenization = tok
        summary = (
            f"{format_count(tok.samples or 0)} samples, {format_count(tok.tokens or 0)} tokens "
            f"({format_count(tok.supervised_tokens or 0)} supervised), {tok.truncated or 0} truncated"
        )
    elif stage == Stage.TRAIN:
        draft.status.drafter_uri = results.training_final_uri(pods) or f"{ctx.run_root}/final"
        summary = f"drafter exported to {draft.status.drafter_uri}"
    elif stage == Stage.EVAL:
        ev = results.summarize_evaluation(pods)
        _stages(draft).evaluation = ev
        draft.status.acceptance_length = ev.acceptance_length
        shown = "?" if ev.acceptance_length is None else f"{ev.acceptance_length:.2f}"
        summary = f"acceptance length {shown} over {ev.prompts or '?'} prompts"
    message = Reason.STAGE_SUCCEEDED.message(stage=stage.value, summary=summary)
    draft.set_condition(
        STAGE_CONDITIONS[stage], ConditionStatus.TRUE, Reason.STAGE_SUCCEEDED, message
    )
    draft.status.message = message
    return True


def record_audit(
    ctx: StageContext,
    draft: Draft,
    stage: Stage,
    attempt: int,
    child: ChildView,
    pods: Sequence[PodView],
) -> bool:
    """A finished audit: pass moves on, fail stops at the gate, an error fails the run."""
    gate = STAGE_GATES[stage]
    result = results.build_audit_result(
        gate,
        pods,
        job_ok=child.finished.ok,
        generation=draft.generation,
        attempt=attempt,
        now=draft.now,
    )
    if result is None:
        record_failure(ctx, draft, stage, attempt, child, pods)
        return False
    set_audit(draft, gate, result)
    report = result.report_uri or "(no report URI in the stage result)"
    condition = STAGE_CONDITIONS[stage]
    if result.verdict == Verdict.PASS:
        message = Reason.AUDIT_PASSED.message(gate=gate.value, report_uri=report)
        draft.set_condition(condition, ConditionStatus.TRUE, Reason.AUDIT_PASSED, message)
        draft.set_condition(
            ConditionType.DATA_AUDIT_PASSED,
            ConditionStatus.TRUE,
            Reason.AUDIT_PASSED,
            message,
            announce=False,
        )
        draft.status.message = message
        return True
    message = Reason.AUDIT_FAILED.message(
        gate=gate.value, violations=describe_violations(result), report_uri=report,
        run=ctx.run.name, generation=draft.generation,
    )  # fmt: skip
    draft.set_condition(
        condition, ConditionStatus.TRUE, Reason.AUDIT_FAILED, message, announce=False
    )
    draft.set_condition(
        ConditionType.DATA_AUDIT_PASSED, ConditionStatus.FALSE, Reason.AUDIT_FAILED, message
    )
    draft.gate_failures.append(gate)
    draft.set_phase(Phase.AUDIT_FAILED, message)
    saving = savings.estimate(ctx, draft, stage)
    if saving is not None:
        draft.event(
            Reason.GPU_HOURS_SAVED,
            Reason.GPU_HOURS_SAVED.message(
                gate=gate.value, stages=", ".join(s.value for s in saving.stages),
                hours=saving.gpu_hours, basis=saving.basis,
            ),
        )  # fmt: skip
    return False


def approve_gate(ctx: StageContext, draft: Draft, gate: Gate, result: AuditResult) -> None:
    """The user accepted a failed gate: record it and let the run go on."""
    generation = result.observed_generation or 0
    set_audit(draft, gate, result.model_copy(update={"approved": True}))
    message = Reason.AUDIT_APPROVED.message(
        gate=gate.value, generation=generation, violations=describe_violations(result)
    )
    draft.set_condition(
        STAGE_CONDITIONS[GATE_STAGES[gate]], ConditionStatus.TRUE, Reason.AUDIT_APPROVED, message
    )
    draft.set_condition(
        ConditionType.DATA_AUDIT_PASSED,
        ConditionStatus.TRUE,
        Reason.AUDIT_APPROVED,
        message,
        announce=False,
    )
    approvals = list(draft.status.approvals or ())
    if not any(a.gate == gate and a.generation == generation for a in approvals):
        approvals.append(Approval(gate=gate, generation=generation, time=draft.now))
    draft.status.approvals = approvals
    draft.status.message = message


def _recorded_failure(draft: Draft, stage: Stage) -> str:
    """The last pod failure noted while the stage ran (its pods may be deleted by now)."""
    condition = draft.condition(STAGE_CONDITIONS[stage])
    if condition is None or LAST_FAILURE_MARK not in condition.message:
        return ""
    return condition.message.split(LAST_FAILURE_MARK, 1)[1]


def record_failure(
    ctx: StageContext,
    draft: Draft,
    stage: Stage,
    attempt: int,
    child: ChildView,
    pods: Sequence[PodView],
) -> None:
    """A child failed for good: the stage condition, then the run, go Failed."""
    error = results.describe_failure(pods, "") or _recorded_failure(draft, stage)
    error = error or child.finished.message or "the child failed"
    if stage == Stage.REGEN and child.failed_indexes:
        error = f"shards {child.failed_indexes} failed; last failure: {error}"
    permanent = child.finished.message.startswith("PodFailurePolicy")
    if permanent:
        reason = Reason.STAGE_FAILED
        message = reason.message(stage=stage.value, attempt=attempt, error=error)
    else:
        reason = Reason.RETRIES_EXHAUSTED
        limit = stage_retry_limit(ctx, stage)
        message = reason.message(
            stage=stage.value, attempts=limit + 1, limit=limit, error=error, run=ctx.run.name
        )
    draft.set_condition(
        STAGE_CONDITIONS[stage], ConditionStatus.FALSE, reason, message, announce=False
    )
    fail_run(draft, reason, message)
