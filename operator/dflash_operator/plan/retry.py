"""A retry request (annotation `dflash.dev/retry`): reset the named (or current) stage and
every stage after it, so that each runs again as a new attempt."""

from __future__ import annotations

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
from dflash_operator.api.naming import child_name
from dflash_operator.plan import outcomes
from dflash_operator.plan.actions import DeleteChild
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import Observed
from dflash_operator.plan.requests import RetryRequest
from dflash_operator.plan.stages import STAGE_GATES, StageContext, stage_kind
from dflash_operator.plan.state import StageState, stage_state


def apply_retry(
    ctx: StageContext,
    draft: Draft,
    retry: RetryRequest,
    stages: tuple[Stage, ...],
    observed: Observed,
) -> None:
    """Reset the named (or current) stage and everything after it; stop what still runs."""
    active = list(stages)
    current = next((s for s in active if stage_state(draft, s) != StageState.DONE), None)
    if current is None:
        return
    target = current
    if retry.stage in active and active.index(retry.stage) <= active.index(current):
        target = retry.stage
    elif target == Stage.AUDIT_CANARY and Stage.CANARY in active:
        # A failed canary is retried from its answers: the canary stage regenerates them when
        # the sources or settings changed since (and only re-audits when nothing did).
        target = Stage.CANARY
    reset_gate = False
    for stage in active[active.index(target) :]:
        kind = stage_kind(ctx, stage).kind
        attempt = draft.attempt(stage)
        if attempt:
            old = observed.child(kind, child_name(ctx.run.name, stage, attempt))
            if old is not None and not old.finished.done and not old.deleting:
                draft.act(DeleteChild(kind, old.name))
        gate = STAGE_GATES.get(stage, Gate.TRAINING if stage == Stage.TRAIN else None)
        if gate is not None and draft.condition(STAGE_CONDITIONS[stage]) is not None:
            had_result = draft.status.audit is not None and draft.status.audit.result(gate)
            outcomes.clear_audit(draft, gate)
            reset_gate = reset_gate or stage in STAGE_GATES or bool(had_result)
        if stage == target:
            message = Reason.RETRY_REQUESTED.message(
                stage=stage.value, token=retry.token, attempt=attempt + 1
            )
            draft.set_condition(
                STAGE_CONDITIONS[stage], ConditionStatus.FALSE, Reason.RETRY_REQUESTED, message
            )
            draft.status.message = message
        else:
            draft.remove_condition(STAGE_CONDITIONS[stage])
    if reset_gate:
        draft.set_condition(
            ConditionType.DATA_AUDIT_PASSED, ConditionStatus.UNKNOWN, Reason.RETRY_REQUESTED,
            draft.status.message or "", announce=False,
        )  # fmt: skip
    if draft.status.phase == Phase.FAILED:
        draft.set_condition(
            ConditionType.FAILED, ConditionStatus.FALSE, Reason.RETRY_REQUESTED,
            draft.status.message or "", announce=False,
        )  # fmt: skip
        draft.status.completion_time = None
        draft.set_phase(STAGE_PHASES[target])
