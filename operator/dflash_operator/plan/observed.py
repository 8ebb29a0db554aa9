"""What the planner sees of a run's children: small frozen summaries of Jobs, PyTorchJobs,
ConfigMaps and pods (built by `children/kinds.py` from API objects), plus the outcome of
creations that failed in this pass and of the lookups of objects the run names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from dflash_operator.api.constants import Stage


@dataclass(frozen=True)
class Finished:
    """The answer of every child kind's `finished` predicate."""

    done: bool
    ok: bool = False
    message: str = ""
    # A failure no new attempt can help (its own deadline passed): never restarted.
    final: bool = False


RUNNING = Finished(done=False)


@dataclass(frozen=True)
class ChildView:
    """One child object of the run, reduced to what decisions need."""

    kind: str
    api_version: str
    name: str
    uid: str
    owner_uid: str | None = None
    stage: Stage | None = None
    attempt: int = 1
    suspended: bool = False
    finished: Finished = RUNNING
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    failed_indexes: str | None = None
    config_hash: str | None = None
    # What a stage's child was rendered from (annotation dflash.dev/spec-inputs); None on
    # children made by an operator version before it (taken as current).
    spec_inputs: str | None = None
    # Restarts after failures its stage had made when the operator created it (meta.py).
    failure_restarts: int = 0
    active_deadline_seconds: int | None = None
    deleting: bool = False
    # The Kueue LocalQueue its labels name (kueue.x-k8s.io/queue-name); None: not queued.
    queue: str | None = None


@dataclass(frozen=True)
class ObjectRef:
    """An object of the cluster a run names but does not own (plan/references.py): its kind,
    name and the field that names it; `key`: the key of a Secret the run needs."""

    kind: str
    name: str
    field: str
    key: str | None = None


@dataclass(frozen=True)
class Lookup:
    """Whether a named object exists (None: it could not be checked, e.g. no RBAC for it, or
    the cluster does not serve its API: then `not_served` names the API and what serves it)."""

    ref: ObjectRef
    exists: bool | None
    not_served: str | None = None


@dataclass(frozen=True)
class Termination:
    """A container's terminated state, as a kubelet reports it."""

    exit_code: int
    reason: str | None = None
    message: str | None = None
    finished_at: datetime | None = None


# Pod phases after which a pod writes nothing more and holds no GPU.
POD_DONE_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class PodView:
    """A pod of a child: where it ran and how its container ended.

    `owner_uid` is the UID of the Job or PyTorchJob that controls it: pods are matched to
    children by it, never by name, since a re-created run's child takes the old child's name
    while the old pods may still be terminating (or orphaned, with no owner at all)."""

    name: str
    uid: str
    owner_name: str
    owner_uid: str | None = None
    # Label dflash.dev/run-uid: the run it belongs to, even once its Job is gone.
    run_uid: str | None = None
    stage: Stage | None = None
    attempt: int = 1
    index: int | None = None
    phase: str = "Pending"
    node_name: str | None = None
    terminated: Termination | None = None
    # lastState.terminated: the previous crash of a container restarted in place (OnFailure).
    last_failure: Termination | None = None
    restarts: int = 0
    # GPUs its containers request (any `<vendor>/gpu` resource), and status.startTime.
    gpus: float = 0.0
    started_at: datetime | None = None
    replica_type: str | None = None
    # A TrainJob's pod: the UID of its JobSet (label jobset.sigs.k8s.io/jobset-uid), which
    # the observer resolves to the TrainJob's UID in `owner_uid`.
    jobset_uid: str | None = None
    # Why its main container has not started (kubelet's waiting state), e.g.
    # CreateContainerConfigError: 'secret "s3" not found'.
    waiting_reason: str | None = None
    waiting_message: str | None = None
    # Its Secret and ConfigMap volumes: (volume, kind, object name).
    volumes: tuple[tuple[str, str, str], ...] = ()
    # The kubelet's FailedMount events while it waits in ContainerCreating (their messages:
    # 'MountVolume.SetUp failed for volume "s3-ca" : secret "ca" not found'); read by the
    # observer only for such a pod.
    mount_failures: tuple[str, ...] = ()

    @property
    def is_creating(self) -> bool:
        """Pending with its container not created yet (volumes, image pull, sandbox)."""
        return self.phase == "Pending" and self.waiting_reason == "ContainerCreating"


@dataclass(frozen=True)
class WorkloadView:
    """Kueue's Workload of a queued child: whether it is admitted, and Kueue's own words."""

    name: str
    job_uid: str  # the UID of the Job / PyTorchJob it admits
    active: bool = True
    admitted: bool = False
    cluster_queue: str | None = None
    # The message of QuotaReserved (why it waits: which quota is short) or of Admitted.
    message: str = ""
    # Evicted (preempted, deactivated): Kueue stopped the child and queues it again.
    evicted: str | None = None


@dataclass(frozen=True)
class CreateFailure:
    """A child the executor could not create in this pass."""

    kind: str
    name: str
    message: str
    # 400/422: the object itself is refused, trying again cannot help.
    permanent: bool = False
    # 404 on create: the cluster does not serve the kind (its CRD is not installed).
    api_missing: bool = False
    # Not created: objects it needs (a PriorityClass, a LocalQueue, ...) do not exist.
    missing: tuple[ObjectRef, ...] = ()


@dataclass(frozen=True)
class Observed:
    """Everything the planner knows about the run's children."""

    children: tuple[ChildView, ...] = ()
    pods: tuple[PodView, ...] = ()
    create_failures: tuple[CreateFailure, ...] = field(default=())
    workloads: tuple[WorkloadView, ...] = ()
    lookups: tuple[Lookup, ...] = ()
    # Workload kinds of training the API server serves (TrainJob, PyTorchJob), from API
    # discovery; None: not looked up (every kind is taken as served).
    served_kinds: frozenset[str] | None = None

    def child(self, kind: str, name: str) -> ChildView | None:
        for child in self.children:
            if child.kind == kind and child.name == name:
                return child
        return None

    def pods_of(self, child: ChildView) -> tuple[PodView, ...]:
        """The child's own pods: those it controls (by UID), never a namesake's."""
        return tuple(pod for pod in self.pods if pod.owner_uid == child.uid)

    def workload_of(self, child: ChildView) -> WorkloadView | None:
        """The Kueue Workload that admits the child (by the child's UID)."""
        for workload in self.workloads:
            if workload.job_uid == child.uid:
                return workload
        return None

    def failure(self, kind: str, name: str) -> CreateFailure | None:
        for failure in self.create_failures:
            if failure.kind == kind and failure.name == name:
                return failure
        return None

    def owned_by(self, uid: str | None) -> Observed:
        """Only the children owned by the run `uid` (a re-created run ignores its ancestor's)."""
        if uid is None:
            return self
        kept = tuple(c for c in self.children if c.owner_uid in (None, uid))
        uids = {c.uid for c in kept}
        # A pod whose Job was deleted (a retry, a restart) still runs until it terminates: it
        # is the run's by its run-uid label (pods made before that label: by their owner).
        pods = tuple(
            p for p in self.pods
            if p.run_uid == uid or (p.run_uid is None and p.owner_uid in uids)
        )  # fmt: skip
        return replace(self, children=kept, pods=pods)

    def with_children(self, updated: Iterable[ChildView]) -> Observed:
        """Replace (or add) children by kind and name, e.g. with what the executor created."""
        by_key = {(c.kind, c.name): c for c in self.children}
        for child in updated:
            by_key[(child.kind, child.name)] = child
        return replace(self, children=tuple(by_key.values()))

    def with_deleting(self, keys: Iterable[tuple[str, str]]) -> Observed:
        """Children just deleted: still there (being deleted) as far as the next plan knows."""
        going = set(keys)
        children = tuple(
            replace(c, deleting=True) if (c.kind, c.name) in going else c for c in self.children
        )
        return replace(self, children=children)

    def with_failures(self, failures: Iterable[CreateFailure]) -> Observed:
        return replace(self, create_failures=(*self.create_failures, *failures))

    def with_lookups(self, lookups: Iterable[Lookup]) -> Observed:
        return replace(self, lookups=(*self.lookups, *lookups))

    def looked_up(self, refs: Iterable[ObjectRef]) -> bool:
        """Were all of `refs` looked up in this pass?"""
        known = {lookup.ref for lookup in self.lookups}
        return all(ref in known for ref in refs)

    def not_served(self, refs: Iterable[ObjectRef]) -> str | None:
        """Why one of `refs` could not be looked up: its API is not served (this pass)."""
        wanted = set(refs)
        for lookup in self.lookups:
            if lookup.ref in wanted and lookup.not_served:
                return lookup.not_served
        return None

    def missing(self, refs: Iterable[ObjectRef]) -> tuple[ObjectRef, ...]:
        """Those of `refs` a lookup of this pass found absent."""
        absent = {lookup.ref for lookup in self.lookups if lookup.exists is False}
        return tuple(ref for ref in refs if ref in absent)
