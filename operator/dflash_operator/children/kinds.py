"""The small protocol every child kind follows (identity, `finished -> (done, ok, message)`,
suspend), its implementations for Job, PyTorchJob, TrainJob and ConfigMap, and the summaries
of children and pods the planner reads (`plan/observed.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar, Protocol

from dflash_operator.api.constants import (
    API_VERSION,
    KIND,
    KUEUE_JOB_UID_LABEL,
    KUEUE_QUEUE_LABEL,
    LABEL_ATTEMPT,
    LABEL_RUN_UID,
    LABEL_STAGE,
    Stage,
)
from dflash_operator.children.meta import (
    ANNOTATION_CONFIG_HASH,
    ANNOTATION_FAILURE_RESTARTS,
    ANNOTATION_SPEC_INPUTS,
)
from dflash_operator.plan.observed import (
    RUNNING,
    ChildView,
    Finished,
    PodView,
    Termination,
    WorkloadView,
)

Body = Mapping[str, Any]
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"

JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
PYTORCHJOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
# A TrainJob's pods belong to Jobs of its JobSet (named like the TrainJob); JobSet labels them
# with the JobSet's name and UID (jobset_types.go, v0.12.0).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
# The Failed reason of a TrainJob past its activeDeadlineSeconds (trainjob_types.go, v2.3.0).
TRAINJOB_DEADLINE_EXCEEDED = "DeadlineExceeded"


class ChildKind(Protocol):
    """How the operator reads and steers one kind of child."""

    @property
    def kind(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def plural(self) -> str: ...

    @property
    def api_version(self) -> str: ...

    def finished(self, body: Body) -> Finished: ...

    def is_suspended(self, body: Body) -> bool: ...

    def active_deadline(self, body: Body) -> int | None: ...

    def control_patch(self, **fields: Any) -> dict[str, Any]: ...

    def suspend_patch(self, suspend: bool) -> dict[str, Any]: ...

    @property
    def deadline_mutable(self) -> bool: ...

    def replica_counts(self, status: Body) -> list[Mapping[str, Any]]: ...


def _conditions(body: Body) -> dict[str, Mapping[str, Any]]:
    status = body.get("status") or {}
    return {
        c.get("type", ""): c for c in status.get("conditions") or () if c.get("status") == "True"
    }


def _describe(condition: Mapping[str, Any], default: str) -> str:
    reason = condition.get("reason") or ""
    message = condition.get("message") or default
    return f"{reason}: {message}" if reason else message


class _Kind:
    kind: ClassVar[str]
    group: ClassVar[str]
    version: ClassVar[str]
    plural: ClassVar[str]
    # Where `suspend` and `activeDeadlineSeconds` live in the object.
    control_path: ClassVar[tuple[str, ...]] = ("spec",)
    # False: the API server refuses a change of a created child's activeDeadlineSeconds.
    deadline_mutable: ClassVar[bool] = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def _control(self, body: Body) -> Mapping[str, Any]:
        block: Mapping[str, Any] = body
        for key in self.control_path:
            block = block.get(key) or {}
        return block

    def is_suspended(self, body: Body) -> bool:
        return bool(self._control(body).get("suspend"))

    def active_deadline(self, body: Body) -> int | None:
        seconds = self._control(body).get("activeDeadlineSeconds")
        return int(seconds) if seconds is not None else None

    def control_patch(self, **fields: Any) -> dict[str, Any]:
        """A merge patch of `suspend` / `activeDeadlineSeconds` (None removes a field)."""
        patch: dict[str, Any] = dict(fields)
        for key in reversed(self.control_path):
            patch = {key: patch}
        return patch

    def suspend_patch(self, suspend: bool) -> dict[str, Any]:
        return self.control_patch(suspend=suspend)

    def replica_counts(self, status: Body) -> list[Mapping[str, Any]]:
        """Per-replica active / succeeded / failed counts (none: the status has totals)."""
        return list((status.get("replicaStatuses") or {}).values())


class JobKind(_Kind):
    """`batch/v1` Job: Complete / Failed conditions, `spec.suspend`."""

    kind = "Job"
    group = "batch"
    version = "v1"
    plural = "jobs"

    def finished(self, body: Body) -> Finished:
        conditions = _conditions(body)
        if "Complete" in conditions:
            return Finished(True, True, conditions["Complete"].get("message") or "completed")
        if "Failed" in conditions:
            return Finished(True, False, _describe(conditions["Failed"], "the Job failed"))
        return RUNNING


class PyTorchJobKind(_Kind):
    """`kubeflow.org/v1` PyTorchJob: Succeeded / Failed conditions, `runPolicy.suspend`."""

    kind = "PyTorchJob"
    group = "kubeflow.org"
    version = "v1"
    plural = "pytorchjobs"
    control_path = ("spec", "runPolicy")

    def finished(self, body: Body) -> Finished:
        conditions = _conditions(body)
        if "Succeeded" in conditions:
            return Finished(True, True, conditions["Succeeded"].get("message") or "succeeded")
        if "Failed" in conditions:
            return Finished(True, False, _describe(conditions["Failed"], "the PyTorchJob failed"))
        return RUNNING


class TrainJobKind(_Kind):
    """`trainer.kubeflow.org/v1alpha1` TrainJob (Kubeflow Trainer v2): Complete / Failed
    conditions, `spec.suspend`, an immutable `spec.activeDeadlineSeconds`, and the counts of
    its JobSet's Jobs in `status.jobsStatus` (trainjob_types.go, v2.3.0)."""

    kind = "TrainJob"
    group = "trainer.kubeflow.org"
    version = "v1alpha1"
    plural = "trainjobs"
    deadline_mutable = False

    def finished(self, body: Body) -> Finished:
        conditions = _conditions(body)
        if "Complete" in conditions:
            return Finished(True, True, conditions["Complete"].get("message") or "complete")
        if "Failed" in conditions:
            failed = conditions["Failed"]
            final = failed.get("reason") == TRAINJOB_DEADLINE_EXCEEDED
            return Finished(True, False, _describe(failed, "the TrainJob failed"), final=final)
        return RUNNING

    def replica_counts(self, status: Body) -> list[Mapping[str, Any]]:
        return [job for job in status.get("jobsStatus") or () if isinstance(job, Mapping)]


class ConfigMapKind(_Kind):
    """`v1` ConfigMap: never running, never suspended."""

    kind = "ConfigMap"
    group = ""
    version = "v1"
    plural = "configmaps"

    def finished(self, body: Body) -> Finished:
        return Finished(True, True)

    def is_suspended(self, body: Body) -> bool:
        return False

    def active_deadline(self, body: Body) -> int | None:
        return None

    def control_patch(self, **fields: Any) -> dict[str, Any]:
        raise TypeError("a ConfigMap cannot be suspended or given a deadline")


JOB = JobKind()
PYTORCHJOB = PyTorchJobKind()
TRAINJOB = TrainJobKind()
CONFIG_MAP = ConfigMapKind()
KINDS: dict[str, ChildKind] = {k.kind: k for k in (JOB, PYTORCHJOB, TRAINJOB, CONFIG_MAP)}
# Kinds that run pods (their names carry an attempt number; the rest are one per run).
WORKLOAD_KINDS = frozenset({JOB.kind, PYTORCHJOB.kind, TRAINJOB.kind})


def _stage(labels: Mapping[str, str]) -> Stage | None:
    try:
        return Stage(labels.get(LABEL_STAGE, ""))
    except ValueError:
        return None


def _count(raw: str | None) -> int:
    return int(raw) if raw and raw.isdigit() else 0


def _attempt(labels: Mapping[str, str]) -> int:
    raw = labels.get(LABEL_ATTEMPT, "1")
    return int(raw) if raw.isdigit() else 1


def run_owner_uid(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == KIND and ref.get("apiVersion") == API_VERSION:
            return str(ref.get("uid"))
    return None


def summarize_child(body: Body) -> ChildView | None:
    """The planner's view of a Job, PyTorchJob or ConfigMap; None for any other kind."""
    child_kind = KINDS.get(str(body.get("kind")))
    if child_kind is None:
        return None
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = body.get("status") or {}
    replicas = child_kind.replica_counts(status)
    return ChildView(
        kind=child_kind.kind,
        api_version=child_kind.api_version,
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        owner_uid=run_owner_uid(meta),
        stage=_stage(labels),
        attempt=_attempt(labels),
        suspended=child_kind.is_suspended(body),
        finished=child_kind.finished(body),
        active=int(status.get("active") or sum(r.get("active") or 0 for r in replicas)),
        succeeded=int(status.get("succeeded") or sum(r.get("succeeded") or 0 for r in replicas)),
        failed=int(status.get("failed") or sum(r.get("failed") or 0 for r in replicas)),
        failed_indexes=status.get("failedIndexes") or None,
        config_hash=(meta.get("annotations") or {}).get(ANNOTATION_CONFIG_HASH),
        spec_inputs=(meta.get("annotations") or {}).get(ANNOTATION_SPEC_INPUTS),
        failure_restarts=_count((meta.get("annotations") or {}).get(ANNOTATION_FAILURE_RESTARTS)),
        active_deadline_seconds=child_kind.active_deadline(body),
        deleting=bool(meta.get("deletionTimestamp")),
        queue=labels.get(KUEUE_QUEUE_LABEL) or None,
    )


def summarize_jobset(body: Body) -> tuple[str, str] | None:
    """(JobSet UID, UID of the TrainJob that controls it): how a TrainJob's pods, which name
    only their JobSet, are matched to the TrainJob. None for a JobSet of no controller."""
    meta = body.get("metadata") or {}
    owner = controller_uid(meta)
    if not meta.get("uid") or owner is None:
        return None
    return str(meta["uid"]), owner


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for condition in status.get("conditions") or ():
        if condition.get("type") == type_:
            return dict(condition)
    return None


def _said(condition: Mapping[str, Any]) -> str:
    return str(condition.get("message") or condition.get("reason") or "")


def summarize_workload(body: Body) -> WorkloadView | None:
    """Kueue's Workload of a child (label kueue.x-k8s.io/job-uid names the child's UID)."""
    meta = body.get("metadata") or {}
    job_uid = (meta.get("labels") or {}).get(KUEUE_JOB_UID_LABEL)
    if not job_uid:
        return None
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    admitted = _condition(status, "Admitted")
    reserved = _condition(status, "QuotaReserved")
    evicted = _condition(status, "Evicted")
    is_admitted = admitted is not None and admitted.get("status") == "True"
    said: Mapping[str, Any] = (admitted if is_admitted else (reserved or admitted)) or {}
    return WorkloadView(
        name=str(meta.get("name")),
        job_uid=str(job_uid),
        active=spec.get("active", True) is not False,
        admitted=is_admitted,
        cluster_queue=(status.get("admission") or {}).get("clusterQueue"),
        message=str(said.get("message") or ""),
        evicted=_said(evicted) if evicted and evicted.get("status") == "True" else None,
    )


def _time(raw: Any) -> datetime | None:
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None


def _termination(state: Mapping[str, Any] | None) -> Termination | None:
    terminated = (state or {}).get("terminated")
    if not terminated:
        return None
    return Termination(
        exit_code=int(terminated.get("exitCode") or 0),
        reason=terminated.get("reason"),
        message=terminated.get("message"),
        finished_at=_time(terminated.get("finishedAt")),
    )


def controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The UID of the object that controls a pod (its Job or PyTorchJob), from the controller
    ownerReference. None for an orphan: garbage collection removes the reference of a deleted
    owner when it orphans (the `controller-uid` label stays, so it is not trusted alone)."""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid"):
            return str(ref["uid"])
    return None


def summarize_pod(body: Body) -> PodView | None:
    """A pod of a Job, PyTorchJob or TrainJob: phase, node, and how its main container ended.
    A TrainJob's pod names its JobSet (the TrainJob's name) as owner and keeps the JobSet's
    UID in `jobset_uid` until the observer resolves it to the TrainJob's (`lift_to_trainjobs`)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    owner = (
        labels.get(JOBSET_NAME_LABEL)
        or labels.get(JOB_NAME_LABEL)
        or labels.get("job-name")
        or labels.get(PYTORCHJOB_NAME_LABEL)
    )
    if not owner:
        return None
    status = body.get("status") or {}
    statuses = status.get("containerStatuses") or []
    main = statuses[0] if statuses else {}
    waiting = (main.get("state") or {}).get("waiting") or {}
    index = labels.get(JOB_INDEX_LABEL)
    jobset_uid = labels.get(JOBSET_UID_LABEL) or None
    replica_type = labels.get(REPLICA_TYPE_LABEL)
    if jobset_uid and index is not None:
        # Torch ranks of a TrainJob are the completion indexes of its one Indexed Job.
        replica_type = "master" if index == "0" else "worker"
    return PodView(
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        owner_name=str(owner),
        owner_uid=controller_uid(meta),
        run_uid=labels.get(LABEL_RUN_UID) or None,
        stage=_stage(labels),
        attempt=_attempt(labels),
        index=int(index) if index is not None and index.isdigit() else None,
        phase=str(status.get("phase") or "Pending"),
        node_name=(body.get("spec") or {}).get("nodeName"),
        terminated=_termination(main.get("state")),
        last_failure=_termination(main.get("lastState")),
        restarts=int(main.get("restartCount") or 0),
        replica_type=replica_type,
        jobset_uid=jobset_uid,
        gpus=_requested_gpus(body),
        started_at=_time(status.get("startTime")),
        waiting_reason=waiting.get("reason") or None,
        waiting_message=waiting.get("message") or None,
        volumes=_object_volumes(body),
    )


def _object_volumes(body: Body) -> tuple[tuple[str, str, str], ...]:
    """(volume, kind, name) of the pod's Secret and ConfigMap volumes: a FailedMount event
    names the volume, and for a missing key only the volume."""
    found = []
    for volume in (body.get("spec") or {}).get("volumes") or ():
        if not isinstance(volume, Mapping):
            continue
        secret, config_map = volume.get("secret"), volume.get("configMap")
        if isinstance(secret, Mapping) and secret.get("secretName"):
            found.append((str(volume.get("name")), "Secret", str(secret["secretName"])))
        elif isinstance(config_map, Mapping) and config_map.get("name"):
            found.append((str(volume.get("name")), "ConfigMap", str(config_map["name"])))
    return tuple(found)


def _requested_gpus(body: Body) -> float:
    """GPUs the pod's containers request: any extended resource named `<vendor>/gpu`."""
    total = 0.0
    for container in (body.get("spec") or {}).get("containers") or ():
        requests = (container.get("resources") or {}).get("requests") or {}
        for name, value in requests.items():
            if name.endswith("/gpu"):
                try:
                    total += float(value)
                except (TypeError, ValueError):
                    continue
    return total
