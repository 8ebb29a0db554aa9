"""The training likelihood monitor's verdict (gate `training`): a train child that ended
because the monitor stopped it did not succeed; the run stops at AuditFailed, naming the
source and the step (docs/audit-gates.md, section 8.3). Pure, on a `Draft`.

The verdict is read from any train pod's termination message, the current one or the one
before an in-place restart (OnFailure), so a stop is seen even while the PyTorchJob restarts
the container; an unfinished child is then deleted, so it never trains on the data again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
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
from dflash_operator.plan.actions import DeleteChild
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import ChildView, Observed, PodView, Termination


def _is_stop(data: dict[str, Any]) -> bool:
    return data.get("gate") == Gate.TRAINING.value and data.get("verdict") == "fail"


def monitor_stop(pods: Sequence[PodView]) -> tuple[PodView, dict[str, Any]] | None:
    """The pod whose container the monitor stopped, with its result; else None."""
    for pod in pods:
        for term in (pod.terminated, pod.last_failure):
            data = results.parse_result(term.message) if term else None
            if data is not None and _is_stop(data):
                return pod, data
    return None


def record_training_audit(draft: Draft, attempt: int, child: ChildView, observed: Observed) -> bool:
    """Record a monitor stop (once per attempt); True when training was stopped by it."""
    found = monitor_stop(observed.pods_of(child))
    if found is None:
        return False
    pod, data = found
    stopped = replace(pod, terminated=Termination(0, message=json.dumps(data)))
    result = results.build_audit_result(
        Gate.TRAINING, [stopped], job_ok=True, generation=draft.generation, attempt=attempt,
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
    if not child.finished.done and not child.deleting:
        draft.act(DeleteChild(child.kind, child.name))  # no restart into the same data
    return True
