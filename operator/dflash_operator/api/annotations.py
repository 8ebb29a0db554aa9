"""Values of the annotations a user sets on a DFlashRun: audit approvals and retries.

`dflash.dev/approve-audit: "<gate>@<generation>[,<gate>@<generation>...]"` accepts a failed
gate for the run's generation it failed at (so an old approval never covers new data);
`dflash.dev/retry: <any new value>` retries the failed stage once per new value.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_operator.api.constants import ANNOTATION_APPROVE_AUDIT, ANNOTATION_RETRY, Gate

MAX_RETRY_TOKEN_LENGTH = 253


@dataclass(frozen=True)
class AuditApproval:
    """One `<gate>@<generation>` entry of the approve-audit annotation."""

    gate: Gate
    generation: int

    def __str__(self) -> str:
        return f"{self.gate.value}@{self.generation}"


class AnnotationError(ValueError):
    """An annotation value the operator cannot act on; the message quotes it."""


def parse_approvals(value: str) -> list[AuditApproval]:
    """Parse `completions@3,tokens@5`; raise AnnotationError naming the bad entry."""
    gates = ", ".join(gate.value for gate in Gate if gate.approvable)
    approvals = []
    for entry in (part.strip() for part in value.split(",")):
        gate, sep, generation = entry.partition("@")
        if gate == Gate.TRAINING.value:
            raise AnnotationError(
                f"{ANNOTATION_APPROVE_AUDIT}={value!r}: the training gate cannot be approved "
                "(it stopped a training half-way); raise "
                "spec.audit.likelihood.maxOffDistributionRate or set monitorEverySteps: 0, "
                "then retry with dflash.dev/retry=train"
            )
        if not sep or gate not in {g.value for g in Gate} or not generation.isdigit():
            raise AnnotationError(
                f"{ANNOTATION_APPROVE_AUDIT}={value!r}: entry {entry!r} is not accepted; "
                f"use <gate>@<generation> with gate one of {gates}, e.g. completions@3"
            )
        approvals.append(AuditApproval(Gate(gate), int(generation)))
    return approvals


def is_new_retry(value: str | None, last_handled: str | None) -> bool:
    """A retry is requested when the annotation holds a value not acted on yet."""
    if value is None or not value.strip():
        return False
    if len(value) > MAX_RETRY_TOKEN_LENGTH:
        raise AnnotationError(
            f"{ANNOTATION_RETRY} is {len(value)} characters; at most {MAX_RETRY_TOKEN_LENGTH}"
        )
    return value != last_handled
