"""The planner's scratchpad: a copy of the status being rewritten, plus the actions and events
collected on the way. Setting a condition posts an event only when its status or reason
changes, so reconciling the same state twice says nothing twice.
"""

from __future__ import annotations

from datetime import datetime

from dflash_operator.api.constants import (
    ConditionStatus,
    ConditionType,
    Gate,
    Phase,
    Reason,
    Stage,
)
from dflash_operator.api.status import DFlashRunStatus, build_condition, upsert_condition
from dflash_operator.api.status_parts import ChildRef, Condition
from dflash_operator.children.kinds import WORKLOAD_KINDS
from dflash_operator.plan.actions import Action, Event, EventType, Plan
from dflash_operator.plan.observed import ChildView
from dflash_operator.plan.redaction import redact

# Reasons that deserve a Warning event rather than a Normal one.
WARNING_REASONS = frozenset(
    {
        Reason.STAGE_FAILED,
        Reason.RETRIES_EXHAUSTED,
        Reason.DEADLINE_EXCEEDED,
        Reason.BUDGET_EXCEEDED,
        Reason.CHILD_LOST,
        Reason.CHILD_CREATE_FAILED,
        Reason.TRAINING_OPERATOR_MISSING,
        Reason.TRAINING_API_MISSING,
        Reason.WORKLOAD_RESTARTED,
        Reason.OBJECT_MISSING,
        Reason.AUDIT_FAILED,
        Reason.INVALID_SPEC,
        Reason.UNKNOWN_NODE_POOL,
        Reason.TRAINING_WONT_FIT,
        Reason.GENERATION_LONGER_THAN_TRAINING,
        Reason.CLEANUP_FAILED,
    }
)


class Draft:
    """Status under construction for one reconcile pass."""

    def __init__(self, status: DFlashRunStatus, *, generation: int, now: datetime) -> None:
        self.status = status.model_copy(deep=True)
        self.generation = generation
        self.now = now
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.gate_failures: list[Gate] = []
        self.requeue_after: float | None = None
        # True while an edit has not reached the running stage yet (its child restarts).
        self.edit_pending = False

    # --- conditions and events ------------------------------------------------------------
    def condition(self, type_: ConditionType) -> Condition | None:
        return self.status.condition(type_)

    def set_condition(
        self,
        type_: ConditionType,
        status: ConditionStatus,
        reason: Reason,
        message: str,
        *,
        announce: bool = True,
    ) -> None:
        """Upsert a condition; post an event if its status or reason changed."""
        old = self.condition(type_)
        message = redact(message)
        new = build_condition(
            type_, status, reason, message, generation=self.generation, now=self.now
        )
        self.status.conditions = upsert_condition(self.status.conditions, new)
        if announce and (old is None or old.status != status or old.reason != reason.value):
            self.event(reason, message)

    def remove_condition(self, type_: ConditionType) -> None:
        kept = [c for c in self.status.conditions or () if c.type != type_.value]
        self.status.conditions = kept or None

    def event(self, reason: Reason | str, message: str, type_: EventType | None = None) -> None:
        value = reason.value if isinstance(reason, Reason) else reason
        kind: EventType = type_ or ("Warning" if value in WARNING_REASONS else "Normal")
        self.events.append(Event(kind, value, redact(message)))

    # --- actions -----------------------------------------------------------------------------
    def act(self, action: Action) -> None:
        self.actions.append(action)

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = (
            seconds if self.requeue_after is None else min(self.requeue_after, seconds)
        )

    # --- bookkeeping -----------------------------------------------------------------------------
    def attempt(self, stage: Stage) -> int:
        return (self.status.attempts or {}).get(stage.value, 0)

    def set_attempt(self, stage: Stage, attempt: int) -> None:
        self.status.attempts = {**(self.status.attempts or {}), stage.value: attempt}

    def record_child(self, child: ChildView) -> None:
        """Keep the child's UID in status; a new UID for a known name means it was re-created."""
        ref = ChildRef(
            kind=child.kind,
            api_version=child.api_version,
            name=child.name,
            uid=child.uid,
            stage=child.stage.value if child.stage else None,
            attempt=child.attempt if child.kind in WORKLOAD_KINDS else None,
        )
        refs = list(self.status.children or ())
        for index, old in enumerate(refs):
            if old.kind == ref.kind and old.name == ref.name:
                if old != ref:
                    if old.uid and old.uid != ref.uid:
                        self.event(
                            Reason.CHILD_LOST,
                            Reason.CHILD_LOST.message(kind=ref.kind, name=ref.name),
                        )
                    refs[index] = ref
                    self.status.children = refs
                return
        refs.append(ref)
        self.status.children = refs

    def recorded(self, kind: str, name: str) -> ChildRef | None:
        for ref in self.status.children or ():
            if ref.kind == kind and ref.name == name:
                return ref
        return None

    def set_phase(self, phase: Phase, message: str | None = None) -> None:
        self.status.phase = phase
        if message is not None:
            self.status.message = message

    def _redact_status(self) -> None:
        """Whatever a pod said reaches status only through here, without credentials."""
        status = self.status
        if status.message:
            status.message = redact(status.message)
        if status.conditions:
            status.conditions = [
                c.model_copy(update={"message": redact(c.message)}) for c in status.conditions
            ]

    def finish(self) -> Plan:
        self._redact_status()
        # observedGeneration says the status reflects the spec: not before an edit took effect.
        if not self.edit_pending:
            self.status.observed_generation = self.generation
        return Plan(
            status=self.status,
            actions=tuple(self.actions),
            events=tuple(self.events),
            requeue_after=self.requeue_after,
            gate_failures=tuple(self.gate_failures),
        )
