"""User requests written as annotations on the run: `dflash.dev/retry` (re-run a stage with a
new attempt) and `dflash.dev/approve-audit` (accept a failed gate). The values are parsed by
the API (`api/annotations.py`); this adds which stage a retry names, and the lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dflash_operator.api.annotations import (
    AnnotationError,
    AuditApproval,
    is_new_retry,
)
from dflash_operator.api.annotations import (
    parse_approvals as parse_approval_value,
)
from dflash_operator.api.constants import (
    ANNOTATION_APPROVE_AUDIT,
    ANNOTATION_RETRY,
    GATE_STAGES,
    Gate,
    Stage,
)

# "retry: regen" and "retry: regen:2" both name the stage; ':' '@' '/' may add a nonce.
_NONCE_SEPARATORS = (":", "@", "/")
# Gate names are accepted as names of their audit stage: "retry: completions".
_STAGE_ALIASES: dict[str, Stage] = {
    **{stage.value: stage for stage in Stage},
    **{gate.value: stage for gate, stage in GATE_STAGES.items()},
}


@dataclass(frozen=True)
class RetryRequest:
    """A new value of the retry annotation; `stage` when the value names one."""

    token: str
    stage: Stage | None


def _named_stage(token: str) -> Stage | None:
    head = token.strip()
    for separator in _NONCE_SEPARATORS:
        head = head.split(separator, 1)[0]
    return _STAGE_ALIASES.get(head.strip())


def parse_retry(
    annotations: Mapping[str, str], last_token: str | None
) -> tuple[RetryRequest | None, str | None]:
    """(the retry to act on, or None when absent or already acted on; a problem, if any)."""
    token = annotations.get(ANNOTATION_RETRY)
    try:
        if token is None or not is_new_retry(token, last_token):
            return None, None
    except AnnotationError as error:
        return None, str(error)
    return RetryRequest(token=token, stage=_named_stage(token)), None


def parse_approvals(annotations: Mapping[str, str]) -> tuple[list[AuditApproval], list[str]]:
    """(approvals, problems) of the approve-audit annotation (`<gate>@<generation>,...`)."""
    raw = annotations.get(ANNOTATION_APPROVE_AUDIT, "")
    if not raw.strip():
        return [], []
    try:
        return parse_approval_value(raw), []
    except AnnotationError as error:
        return [], [str(error)]


def find_approval(
    approvals: list[AuditApproval], gate: Gate, generation: int | None
) -> AuditApproval | None:
    """The approval that accepts a failure of `gate` computed for `generation`, if any."""
    for approval in approvals:
        if approval.gate == gate and approval.generation == generation:
            return approval
    return None
