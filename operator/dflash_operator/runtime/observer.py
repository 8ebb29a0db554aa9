"""What a reconcile sees of a run's children: the in-memory indexes kopf keeps from its
watches (no API request), plus one direct pod listing when a child has just finished and its
pods' results have not reached the index yet (watch streams are not ordered across kinds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from dflash_operator.api.constants import (
    KUEUE_JOB_UID_LABEL,
    LABEL_MANAGED_BY,
    LABEL_RUN,
    MANAGED_BY,
    STAGE_CONDITIONS,
    Reason,
)
from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.children.kinds import WORKLOAD_KINDS, summarize_pod, summarize_workload
from dflash_operator.plan.observed import ChildView, Observed, PodView, WorkloadView
from dflash_operator.runtime.discovery import ServedKinds
from dflash_operator.runtime.kube import Kube, KubeError

T = TypeVar("T")
RunKey = tuple[str, str]
# Index names: the names of the index functions in handlers/indexes.py.
CHILD_INDEXES = ("dflash_jobs", "dflash_pytorchjobs", "dflash_trainjobs", "dflash_configmaps")
POD_INDEX = "dflash_pods"
# JobSet UID -> TrainJob UID: a TrainJob's pods are owned by Jobs of its JobSet.
JOBSET_INDEX = "dflash_jobsets"
# Iterating an index while kopf's event loop updates it may raise; a few tries suffice.
SNAPSHOT_TRIES = 5
# The kubelet's events for a volume it cannot set up (a missing Secret, ConfigMap or key).
MOUNT_FAILURES = "involvedObject.kind=Pod,reason=FailedMount"
_IN_PROGRESS = frozenset({Reason.STAGE_RUNNING.value, Reason.RETRY_REQUESTED.value})


class Indices(Protocol):
    def __getitem__(self, name: str) -> Mapping[RunKey, Iterable[Any]]: ...


def snapshot(read: Callable[[], Iterable[T]]) -> tuple[T, ...]:
    """A copy of a live collection; retried if it changed while being copied."""
    for _ in range(SNAPSHOT_TRIES - 1):
        try:
            return tuple(read())
        except RuntimeError:
            continue
    return tuple(read())


def _pods_missing(
    status: DFlashRunStatus, children: Iterable[ChildView], pods: Iterable[PodView]
) -> bool:
    """A finished child of the current attempt whose results the index has not shown yet."""
    finished_pods = {pod.owner_uid for pod in pods if pod.terminated is not None}
    for child in children:
        if child.kind not in WORKLOAD_KINDS or child.stage not in STAGE_CONDITIONS:
            continue
        if not child.finished.done or child.uid in finished_pods:
            continue
        condition = status.condition(STAGE_CONDITIONS[child.stage])
        if condition is None or condition.reason in _IN_PROGRESS:
            return True
    return False


def _last_seen(event: Mapping[str, Any]) -> str:
    """Events in the order they were last seen (RFC 3339 times sort as strings)."""
    return str(event.get("lastTimestamp") or event.get("eventTime") or "")


def lift_to_trainjobs(pods: Iterable[PodView], jobsets: Mapping[str, str]) -> list[PodView]:
    """A TrainJob's pod is owned by a Job of its JobSet: its owner becomes the TrainJob that
    controls that JobSet (by UID, never by name). A JobSet already gone leaves the pod with
    no owner, like any orphan."""
    return [
        replace(pod, owner_uid=jobsets.get(pod.jobset_uid)) if pod.jobset_uid else pod
        for pod in pods
    ]


class Observer:
    """Builds `Observed` for a run from the indexes (and, rarely, one pod listing)."""

    def __init__(self, indices: Indices, kube: Kube, served: ServedKinds | None = None) -> None:
        self.indices = indices
        self.kube = kube
        self.served = served or ServedKinds(kube)

    def _index(self, name: str, key: RunKey) -> tuple[Any, ...]:
        index = self.indices[name]
        return snapshot(lambda: index.get(key, ()) if hasattr(index, "get") else ())

    def observe(self, namespace: str, run: str, status: DFlashRunStatus) -> Observed:
        key = (namespace, run)
        children: list[ChildView] = []
        for name in CHILD_INDEXES:
            children.extend(v for v in self._index(name, key) if isinstance(v, ChildView))
        pods = [p for p in self._index(POD_INDEX, key) if isinstance(p, PodView)]
        if _pods_missing(status, children, pods):
            selector = f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_RUN}={run}"
            listed = (summarize_pod(body) for body in self.kube.list("Pod", namespace, selector))
            pods = [pod for pod in listed if pod is not None]
        pods = self._mount_failures(namespace, lift_to_trainjobs(pods, self._jobsets(key)))
        workloads = self._workloads(namespace, children)
        return Observed(
            children=tuple(children),
            pods=tuple(pods),
            workloads=workloads,
            served_kinds=self.served.served(),
        )

    def _jobsets(self, key: RunKey) -> dict[str, str]:
        entries = self._index(JOBSET_INDEX, key)
        return dict(e for e in entries if isinstance(e, tuple) and len(e) == 2)

    def _mount_failures(self, namespace: str, pods: list[PodView]) -> list[PodView]:
        """The kubelet's FailedMount events of the pods waiting in ContainerCreating: one
        list request, only while one waits. A missing Secret volume is known only from them
        (the pod says no more than ContainerCreating). No right to read events (an older
        chart's RBAC): none."""
        if not any(pod.is_creating for pod in pods):
            return pods
        try:
            events = self.kube.list("Event", namespace, field_selector=MOUNT_FAILURES)
        except KubeError as error:
            if error.status == 403:
                return pods
            raise
        messages: dict[str, list[str]] = {}
        for event in sorted(events, key=_last_seen):
            uid = str((event.get("involvedObject") or {}).get("uid") or "")
            message = str(event.get("message") or "")
            if uid and message and message not in messages.setdefault(uid, []):
                messages[uid].append(message)
        return [
            replace(pod, mount_failures=tuple(messages[pod.uid]))
            if pod.is_creating and messages.get(pod.uid) else pod
            for pod in pods
        ]  # fmt: skip

    def _workloads(self, namespace: str, children: list[ChildView]) -> tuple[WorkloadView, ...]:
        """Kueue's Workloads of the unfinished queued children: one list request, only while
        a child waits in (or runs from) a queue. No Kueue (404) or no right to read them: none."""
        uids = sorted(
            c.uid for c in children
            if c.queue and c.kind in WORKLOAD_KINDS and not c.finished.done and not c.deleting
        )  # fmt: skip
        if not uids:
            return ()
        selector = f"{KUEUE_JOB_UID_LABEL} in ({','.join(uids)})"
        try:
            items = self.kube.list("Workload", namespace, selector)
        except KubeError as error:
            if error.not_found or error.status == 403:  # no Kueue, or an older chart's RBAC
                return ()
            raise
        views = (summarize_workload(item) for item in items)
        return tuple(view for view in views if view is not None)
