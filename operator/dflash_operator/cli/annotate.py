"""`approve` and `retry`: the annotation values the operator acts on (`dflash.dev/approve-audit`
and `dflash.dev/retry`), built from the run's status and checked before anything is written.
Pure `build_*` functions; `main.py` sends the patch through `kube.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dflash_operator.api.annotations import (
    MAX_RETRY_TOKEN_LENGTH,
    AnnotationError,
    AuditApproval,
    parse_approvals,
)
from dflash_operator.api.constants import (
    ANNOTATION_APPROVE_AUDIT,
    ANNOTATION_RETRY,
    GATE_STAGES,
    Gate,
    Phase,
    Stage,
    Verdict,
)
from dflash_operator.cli.errors import CliError
from dflash_operator.cli.summary import PIPELINE, RunSummary, StageState

RETRYABLE_PHASES = (Phase.FAILED, Phase.AUDIT_FAILED)


@dataclass(frozen=True)
class AnnotationChange:
    key: str
    value: str
    # Already in place: nothing to write (approving twice is not an error).
    unchanged: bool
    explanation: str


def build_approval(run: dict[str, Any], summary: RunSummary, gate: Gate) -> AnnotationChange:
    """`<gate>@<generation>` added to the run's approvals; the generation the gate failed at."""
    name = summary.name
    audit = summary.status.audit
    result = audit.result(gate) if audit else None
    if result is None:
        raise CliError(
            f"the {gate.value} gate of dflashrun {name} has not run yet: nothing to approve"
        )
    if result.verdict == Verdict.PASS:
        raise CliError(f"the {gate.value} gate of dflashrun {name} passed: nothing to approve")
    metadata = run.get("metadata") or {}
    generation = result.observed_generation or metadata.get("generation") or 1
    existing = (metadata.get("annotations") or {}).get(ANNOTATION_APPROVE_AUDIT)
    approvals: list[AuditApproval] = []
    if existing:
        try:
            approvals = parse_approvals(existing)
        except AnnotationError as exc:
            raise CliError(
                f"{exc}. Fix or remove the annotation first: kubectl annotate dfr {name} "
                f"{ANNOTATION_APPROVE_AUDIT}- -n {summary.namespace}"
            ) from exc
    approval = AuditApproval(gate, int(generation))
    stage = GATE_STAGES[gate]
    after = PIPELINE[PIPELINE.index(stage) + 1] if stage != PIPELINE[-1] else None
    explanation = (
        f"the operator accepts the failed {gate.value} gate of generation {generation}"
        + (f" and goes on with {after.value}" if after else "")
        + "; the approval is recorded in status.approvals"
    )
    if approval in approvals:
        return AnnotationChange(ANNOTATION_APPROVE_AUDIT, existing or "", True, explanation)
    value = ",".join(str(a) for a in [*approvals, approval])
    return AnnotationChange(ANNOTATION_APPROVE_AUDIT, value, False, explanation)


def build_retry(summary: RunSummary, stage: Stage | None, now: datetime) -> AnnotationChange:
    """A new `dflash.dev/retry` value: the operator retries the failed stage once per value."""
    name = summary.name
    if summary.phase not in RETRYABLE_PHASES:
        phase = summary.phase.value if summary.phase else "not started"
        raise CliError(
            f"dflashrun {name} is {phase}: only a Failed or AuditFailed run can be retried"
        )
    failed = (
        summary.current.stage
        if summary.current and summary.current.state == StageState.FAILED
        else None
    )
    if stage is not None and failed is not None and stage != failed:
        raise CliError(
            f"--stage {stage.value}: dflashrun {name} stopped at {failed.value}, and a retry "
            f"starts the stage that stopped it. Use --stage {failed.value} (or leave it out)"
        )
    retried = stage or failed
    label = retried.value if retried else "run"
    token = f"{label}-{now:%Y%m%dT%H%M%SZ}"[:MAX_RETRY_TOKEN_LENGTH]
    explanation = f"the operator starts a new attempt of {label} (annotation value {token})"
    return AnnotationChange(ANNOTATION_RETRY, token, False, explanation)
