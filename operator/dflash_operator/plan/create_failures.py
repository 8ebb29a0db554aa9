"""What the run says when creating a stage's child failed: its API is not served (one
condition, retried until it is), a refusal for good (the run fails), or a refusal that may
pass (an event; the executor retries). Pure.
"""

from __future__ import annotations

from dflash_operator.api.constants import (
    STAGE_CONDITIONS,
    STAGE_PHASES,
    ConditionStatus,
    Reason,
    Stage,
)
from dflash_operator.children.kinds import KINDS
from dflash_operator.plan import outcomes
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.launcher import install_hint
from dflash_operator.plan.observed import CreateFailure


def report_create_failure(draft: Draft, stage: Stage, failure: CreateFailure) -> None:
    if failure.api_missing:
        # No CRD (no training-operator): one condition and one event, not a Warning per try;
        # the create is tried again every 10 s and kopf starts the watch once the CRD appears.
        api_version = KINDS[failure.kind].api_version if failure.kind in KINDS else "?"
        message = Reason.TRAINING_OPERATOR_MISSING.message(
            kind=failure.kind, api_version=api_version, stage=stage.value,
            install=install_hint(failure.kind),
        )  # fmt: skip
        draft.set_condition(
            STAGE_CONDITIONS[stage], ConditionStatus.FALSE, Reason.TRAINING_OPERATOR_MISSING,
            message,
        )  # fmt: skip
        draft.set_phase(STAGE_PHASES[stage], message)
        return
    message = Reason.CHILD_CREATE_FAILED.message(
        kind=failure.kind, name=failure.name, error=failure.message
    )
    if failure.permanent:
        draft.set_condition(
            STAGE_CONDITIONS[stage],
            ConditionStatus.FALSE,
            Reason.CHILD_CREATE_FAILED,
            message,
            announce=False,
        )
        outcomes.fail_run(draft, Reason.CHILD_CREATE_FAILED, message)
        return
    draft.event(Reason.CHILD_CREATE_FAILED, message)
    draft.set_phase(STAGE_PHASES[stage], message)
