"""What a plan asks the executor to do (create, apply config, suspend, delete), the events it
asks to post, and the plan itself. Plain frozen data; `runtime/executor.py` does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dflash_operator.api.constants import Gate, Stage
from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.plan.observed import ObjectRef


@dataclass(frozen=True)
class CreateChild:
    """Create this object unless an object of that name exists (then adopt it); not while an
    object in `requires` is missing (a CreateFailure names them)."""

    manifest: dict[str, Any]
    stage: Stage | None = None
    attempt: int | None = None
    requires: tuple[ObjectRef, ...] = ()

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class ApplyConfig:
    """Create the run's ConfigMap, or replace its data when the spec changed."""

    manifest: dict[str, Any]

    @property
    def kind(self) -> str:
        return "ConfigMap"

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class SetSuspend:
    """Suspend or resume a Job / PyTorchJob."""

    kind: str
    name: str
    suspend: bool


@dataclass(frozen=True)
class SetDeadline:
    """Set (or, with None, remove) a running Job / PyTorchJob's activeDeadlineSeconds."""

    kind: str
    name: str
    seconds: int | None


@dataclass(frozen=True)
class SetWorkloadActive:
    """Deactivate (or reactivate) the Kueue Workload of a queued child: how a queued child is
    suspended, since Kueue resumes any admitted child whose `suspend` someone else set."""

    name: str
    active: bool


@dataclass(frozen=True)
class DeleteChild:
    """Delete a child (a finished one past ttlSecondsAfterFinished, one a retry or an edit
    replaces, those of a failed run); its pods go with it."""

    kind: str
    name: str


@dataclass(frozen=True)
class LookUp:
    """Check that these objects exist (the answer reaches the re-plan as `Observed.lookups`)."""

    refs: tuple[ObjectRef, ...]


Action = (
    CreateChild | ApplyConfig | SetSuspend | SetDeadline | SetWorkloadActive | DeleteChild | LookUp
)
EventType = Literal["Normal", "Warning"]


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event on the run: a CamelCase reason and a human message."""

    type: EventType
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    """The planner's answer: do these actions, then write this status and post these events."""

    status: DFlashRunStatus
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    # Reconcile again after this many seconds even if nothing changes (e.g. a TTL expiring).
    requeue_after: float | None = None
    # Gates that failed in this pass (a metric).
    gate_failures: tuple[Gate, ...] = field(default=())
