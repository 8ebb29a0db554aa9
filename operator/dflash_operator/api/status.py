"""`DFlashRunStatus`: what the operator (and the trainer, for `training`/`checkpoint`) reports,
plus the pure helpers that shape it: condition upsert and the printer-column strings.

Build a status, then send `status.to_api()` as the body of a merge patch to `/status`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from pydantic import Field

from dflash_operator.api.annotations import MAX_RETRY_TOKEN_LENGTH
from dflash_operator.api.constants import ConditionStatus, ConditionType, Gate, Phase, Reason
from dflash_operator.api.spec_training import Launcher
from dflash_operator.api.status_parts import (
    Approval,
    AuditStatus,
    CheckpointStatus,
    ChildRef,
    Condition,
    GpuHours,
    StageProgress,
    StatusModel,
    Timestamp,
    TrainingProgress,
)

# Thousands separators for the Progress column: "412k", "1.6M", "2.1G".
_UNITS = ((1_000_000_000, "G"), (1_000_000, "M"), (1_000, "k"))
# Below this many units one decimal is shown ("1.6M"), above none ("412k").
_ONE_DECIMAL_BELOW = 10


class DFlashRunStatus(StatusModel):
    """Observed state, written by the operator (`training` and `checkpoint` by the trainer, see
    docs/data-contracts.md section 6). Users never write it.
    """

    phase: Phase | None = Field(default=None, description="Where the run is in its life.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation this status was computed for."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        description="metav1.Condition list, one per type (see the reference for types/reasons).",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    )
    message: str | None = Field(default=None, description="What is happening now, in words.")
    start_time: Timestamp | None = Field(default=None, description="When the run started.")
    completion_time: Timestamp | None = Field(
        default=None, description="When the run succeeded or failed."
    )
    progress: str | None = Field(
        default=None,
        description="Progress of the current stage for kubectl get, e.g. 'regen 412k/902k'.",
    )
    audit_verdict: str | None = Field(
        default=None,
        description="Gate verdicts for kubectl get -o wide, e.g. 'completions=pass tokens=fail'.",
    )
    node_pools: str | None = Field(
        default=None,
        description=(
            "Node pools in use for kubectl get -o wide, e.g. 'regen=b200 train=rtx-pro-6000'."
        ),
    )
    stages: StageProgress | None = Field(default=None, description="Per-stage progress.")
    training: TrainingProgress | None = Field(
        default=None, description="Training progress (patched by the trainer)."
    )
    checkpoint: CheckpointStatus | None = Field(
        default=None, description="Newest committed checkpoint (patched by the trainer)."
    )
    audit: AuditStatus | None = Field(default=None, description="Audit results per gate.")
    drafter_uri: str | None = Field(
        default=None, description="s3:// folder of the servable drafter (final/)."
    )
    acceptance_length: float | None = Field(
        default=None, ge=0, description="Mean acceptance length measured by evaluation."
    )
    children: list[ChildRef] | None = Field(
        default=None,
        description="Every child the run created, with its UID.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["kind", "name"],
        },
    )
    attempts: dict[str, int] | None = Field(
        default=None, description="Attempts started per stage, e.g. {regen: 1, train: 2}."
    )
    approvals: list[Approval] | None = Field(
        default=None, description="Audit failures accepted by the user, in order."
    )
    retry_token: str | None = Field(
        default=None,
        max_length=MAX_RETRY_TOKEN_LENGTH,
        description="Value of annotation dflash.dev/retry last acted on.",
    )
    gpu_hours: GpuHours | None = Field(
        default=None, description="GPU-hours the run's pods held, per stage and in total."
    )
    launcher: Launcher | None = Field(
        default=None,
        description=(
            "The workload kind training runs as (trainjob or pytorchjob): spec.training."
            "launcher resolved when training first started, kept for the run's life."
        ),
    )

    def condition(self, type_: ConditionType) -> Condition | None:
        for condition in self.conditions or ():
            if condition.type == type_.value:
                return condition
        return None


def build_condition(
    type_: ConditionType,
    status: ConditionStatus,
    reason: Reason,
    message: str,
    *,
    generation: int,
    now: datetime,
) -> Condition:
    return Condition(
        type=type_.value,
        status=status,
        reason=reason.value,
        message=message,
        observed_generation=generation,
        last_transition_time=now,
    )


def upsert_condition(conditions: list[Condition] | None, new: Condition) -> list[Condition]:
    """Replace the condition of the same type; keep its transition time if status is unchanged.

    Same semantics as apimachinery's `meta.SetStatusCondition`; returns a new list.
    """
    out: list[Condition] = []
    replaced = False
    for old in conditions or ():
        if old.type != new.type:
            out.append(old)
            continue
        keep_time = old.status == new.status
        out.append(
            new.model_copy(update={"last_transition_time": old.last_transition_time})
            if keep_time
            else new
        )
        replaced = True
    if not replaced:
        out.append(new)
    return out


def format_count(value: int) -> str:
    """412000 -> '412k', 1_600_000_000 -> '1.6G'; below 1000 as is."""
    for size, unit in _UNITS:
        if value >= size:
            scaled = value / size
            text = f"{scaled:.1f}" if scaled < _ONE_DECIMAL_BELOW else f"{scaled:.0f}"
            return text.removesuffix(".0") + unit
    return str(value)


def format_bytes(value: int) -> str:
    """53_800_000_000 -> '53.8 GB' (decimal units, as the Hub and S3 consoles show sizes)."""
    for size, unit in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "kB")):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def format_progress(stage: str, done: int, total: int | None, *, exact: bool = False) -> str:
    """The Progress column: 'regen 412k/902k' (counts) or 'train 12000/40000' (exact=True)."""
    show = str if exact else format_count
    return f"{stage} {show(done)}/{show(total)}" if total is not None else f"{stage} {show(done)}"


def format_audit_verdict(audit: AuditStatus | None) -> str | None:
    """The Audit column: 'completions=pass tokens=fail' ('approved' for an accepted failure)."""
    if audit is None:
        return None
    parts = []
    for gate in Gate:
        result = audit.result(gate)
        if result is not None:
            verdict = "approved" if result.approved else result.verdict.value
            parts.append(f"{gate.value}={verdict}")
    return " ".join(parts) or None


def format_node_pools(pools: Mapping[str, str]) -> str | None:
    """The Node pools column: 'regen=b200 train=rtx-pro-6000', in the given order."""
    return " ".join(f"{stage}={pool}" for stage, pool in pools.items()) or None
