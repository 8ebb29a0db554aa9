"""The training likelihood monitor's verdict (gate `training`): a train child that ended
because the monitor stopped it did not succeed; the run stops at AuditFailed, naming the
source and the step (docs/audit-gates.md, section 8.3). Pure, on a `Draft`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dflash_operator.api.constants import (
    STAGE_CONDITIONS,
    ConditionStatus,
    ConditionType,
    Gate,
    Phase,
    Reason,
    Stage,
    Verdict,
)
from dflash_operator.plan import outcomes, results
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import PodView


def monitor_verdict(pods: Sequence[PodView]) -> dict[str, Any] | None:
    """The train stage's result when the monitor stopped training, else None."""
    data, _term = results.latest_result(pods)
    if data and data.get("gate") == Gate.TRAINING.value and data.get("verdict") == "fail":
        return data
    return None


def record_training_audit(draft: Draft, attempt: int, pods: Sequence[PodView]) -> bool:
    """Record a monitor stop (once per attempt); True when training was stopped by it."""
    data = monitor_verdict(pods)
    if data is None:
        return False
    result = results.build_audit_result(
        Gate.TRAINING, pods, job_ok=True, generation=draft.generation, attempt=attempt,
        now=draft.now,
    )  # fmt: skip
    if result is None or result.verdict != Verdict.FAIL:
        return False
    outcomes.set_audit(draft, Gate.TRAINING, result)
    step = data.get("step") if isinstance(data.get("step"), int) else "?"
    message = Reason.TRAINING_AUDIT_FAILED.message(
        step=step, violations=outcomes.describe_violations(result),
        report_uri=result.report_uri or "(no report URI in the stage result)",
    )  # fmt: skip
    draft.set_condition(
        STAGE_CONDITIONS[Stage.TRAIN], ConditionStatus.FALSE, Reason.TRAINING_AUDIT_FAILED,
        message, announce=False,
    )  # fmt: skip
    draft.set_condition(
        ConditionType.DATA_AUDIT_PASSED, ConditionStatus.FALSE, Reason.AUDIT_FAILED, message
    )
    draft.gate_failures.append(Gate.TRAINING)
    draft.set_phase(Phase.AUDIT_FAILED, message)
    return True
