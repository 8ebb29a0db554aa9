"""Where each stage of a run stands, read from the status the operator wrote before."""

from __future__ import annotations

from enum import Enum

from dflash_operator.api.constants import STAGE_CONDITIONS, ConditionStatus, Reason, Stage, Verdict
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.stages import STAGE_GATES

# Reasons of a stage condition that mean the stage failed for good (until a retry).
_FAILED_REASONS = frozenset(
    {
        Reason.STAGE_FAILED.value,
        Reason.RETRIES_EXHAUSTED.value,
        Reason.CHILD_CREATE_FAILED.value,
        Reason.STAGE_RESULT_UNREADABLE.value,
    }
)
# Reasons of a stage stopped by a gate that runs inside it (the training likelihood monitor).
_BLOCKED_REASONS = frozenset({Reason.TRAINING_AUDIT_FAILED.value})
# Reasons that ask for a new attempt of the stage: a retry, an edit of a running stage.
_RESTART_REASONS = frozenset({Reason.RETRY_REQUESTED.value, Reason.SPEC_CHANGED.value})


class StageState(Enum):
    """A stage as the planner sees it."""

    DONE = "done"
    BLOCKED = "blocked"  # a gate failed and nobody approved it
    FAILED = "failed"
    PENDING = "pending"  # never started, or a retry or an edit asked for a new attempt
    RUNNING = "running"


def stage_state(draft: Draft, stage: Stage) -> StageState:
    """From the stage's condition (and, for a gate, its recorded verdict and approval)."""
    condition = draft.condition(STAGE_CONDITIONS[stage])
    if condition is None or condition.reason in _RESTART_REASONS:
        return StageState.PENDING
    if condition.status == ConditionStatus.TRUE:
        if stage not in STAGE_GATES:
            return StageState.DONE
        audit = draft.status.audit
        result = audit.result(STAGE_GATES[stage]) if audit else None
        if result is not None and (result.verdict == Verdict.PASS or result.approved):
            return StageState.DONE
        return StageState.BLOCKED
    if condition.reason in _FAILED_REASONS:
        return StageState.FAILED
    if condition.reason in _BLOCKED_REASONS:
        return StageState.BLOCKED
    return StageState.RUNNING
