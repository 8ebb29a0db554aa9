"""User requests written as annotations on the run: `dflash.dev/retry` (re-run a stage with a
new attempt) and `dflash.dev/approve-audit` (accept a failed gate). Parsing only; the
planner decides what they do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Approval:
    """One entry of the approve annotation; generation None accepts any failure of the gate."""

    gate: Gate
    generation: int | None


def _named_stage(token: str) -> Stage | None:
    head = token.strip()
    for separator in _NONCE_SEPARATORS:
        head = head.split(separator, 1)[0]
    return _STAGE_ALIASES.get(head.strip())


def parse_retry(annotations: Mapping[str, str], last_token: str | None) -> RetryRequest | None:
    """The retry to act on, or None when the annotation is absent or already acted on."""
    token = annotations.get(ANNOTATION_RETRY)
    if token is None or not token.strip() or token == last_token:
        return None
    return RetryRequest(token=token, stage=_named_stage(token))


def parse_approvals(annotations: Mapping[str, str]) -> tuple[list[Approval], list[str]]:
    """(approvals, problems): `<gate>[@<generation>]` entries, comma-separated."""
    raw = annotations.get(ANNOTATION_APPROVE_AUDIT, "")
    approvals: list[Approval] = []
    problems: list[str] = []
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        gate_text, _, generation_text = entry.partition("@")
        try:
            gate = Gate(gate_text.strip())
        except ValueError:
            accepted = ", ".join(g.value for g in Gate)
            problems.append(
                f"{ANNOTATION_APPROVE_AUDIT}: {entry!r} names no gate; accepted: "
                f"<gate>@<generation> with gate one of {accepted}"
            )
            continue
        generation: int | None = None
        if generation_text.strip():
            if not generation_text.strip().isdigit():
                problems.append(
                    f"{ANNOTATION_APPROVE_AUDIT}: {entry!r} has generation "
                    f"{generation_text.strip()!r}; accepted: a whole number such as 3"
                )
                continue
            generation = int(generation_text.strip())
        approvals.append(Approval(gate, generation))
    return approvals, problems


def find_approval(approvals: list[Approval], gate: Gate, generation: int | None) -> Approval | None:
    """The approval that accepts a failure of `gate` computed for `generation`, if any."""
    for approval in approvals:
        if approval.gate == gate and approval.generation in (None, generation):
            return approval
    return None
