"""The objects a run names but does not own (a PriorityClass, a Kueue LocalQueue, a
ServiceAccount, a ConfigMap, a Secret), and what the run says while one is missing.

Without this, a missing object is silent: a Job whose pods name an unknown PriorityClass or
ServiceAccount never gets a pod, Kueue cannot make a Workload for it (it only logs why), and a
pod whose Secret is missing waits in CreateContainerConfigError (an env reference) or in
ContainerCreating with FailedMount events (a volume, e.g. the CA bundle). The run would show its stage
running, forever. Instead:

- Before a stage's child is created, the operator looks up the PriorityClass, the LocalQueue,
  the ServiceAccount and the CA ConfigMap it names (`build_references`, then `CreateChild.
  requires`); a missing one keeps the child from being created.
- Secrets are never read (the operator has no right on them, not even `get`, which would return
  their values): a missing Secret, or a missing key in one, is known from the kubelet on the
  first pod that needs it (`missing_from_pods`): its CreateContainerConfigError for env
  references, its FailedMount events for volumes (the observer reads those of a pod waiting in
  ContainerCreating; events are not watched, so such a pod is looked at again every
  `CREATING_RECHECK_SECONDS`).
- A queued child that Kueue has made no Workload for has its references looked up again
  (`LookUp`), so that the run names what Kueue only writes to its log.

A 404 means "missing" only when API discovery says the cluster serves the kind: a LocalQueue
of a cluster without Kueue (or with another version of its API) is named as an API that is not
served, in the Admitted condition, never ObjectMissing (`runtime/executor.py`).

Each gives the stage's condition reason ObjectMissing naming the object and the field (one
Warning event), and the run goes on by itself once the object exists: lookups are repeated
at every retry (10 s) and the kubelet retries the pod.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from dflash_operator.api.constants import (
    STAGE_CONDITIONS,
    STAGE_PHASES,
    ConditionStatus,
    ConditionType,
    Reason,
    Stage,
)
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.plan import outcomes
from dflash_operator.plan.actions import LookUp
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import ChildView, ObjectRef, Observed, PodView, WorkloadView
from dflash_operator.plan.stages import StageContext, pod_context, runtime_kind, stage_queue

# The kinds the operator looks up by name (its RBAC: `get` on each); Secrets are not among them.
LOOKED_UP_KINDS = (
    "PriorityClass",
    "LocalQueue",
    "ServiceAccount",
    "ConfigMap",
    "ClusterTrainingRuntime",
)
CLUSTER_SCOPED_KINDS = frozenset({"PriorityClass", "ClusterTrainingRuntime"})
# The kubelet's words for a missing Secret / ConfigMap / key (pkg/kubelet/kubelet_pods.go).
_NOT_FOUND = re.compile(r'\b(secret|configmap) "([^"]+)" not found', re.IGNORECASE)
_NO_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) [^/\s]+/(\S+)")
# ...and for a volume it cannot set up: a FailedMount event per volume (generateVolumeMsg in
# pkg/volume/util/operationexecutor), whose cause is the volume plugin's error: the object's
# 'secret "x" not found', or MakePayload's missing key, which names only the key.
_MOUNT = re.compile(r'^MountVolume\.SetUp failed for volume "([^"]+)" : (.*)$', re.DOTALL)
_MOUNT_NO_KEY = re.compile(
    r"(?:configmap references non-existent config key|references non-existent secret key): (\S+)"
)
CONFIG_ERROR = "CreateContainerConfigError"
# Kueue's message on a Workload whose LocalQueue it does not know.
KUEUE_NO_QUEUE = "LocalQueue {queue} doesn't exist"
# A pod waiting in ContainerCreating is looked at again this often: the FailedMount events
# that say why are not watched (they have no label of ours), only listed.
CREATING_RECHECK_SECONDS = 10.0


def build_references(ctx: StageContext, stage: Stage) -> tuple[ObjectRef, ...]:
    """The objects a stage's child needs that the operator looks up before creating it."""
    spec = ctx.spec
    refs: list[ObjectRef] = []
    if spec.priority_class_name:
        refs.append(ObjectRef("PriorityClass", spec.priority_class_name, "spec.priorityClassName"))
    queue = stage_queue(ctx, stage)
    placement = ctx.placements.get(stage)
    if queue:
        field = "spec.queueName"
        if not spec.queue_name and placement is not None:
            field = f"nodePools.{placement.pool_name}.labels[kueue.x-k8s.io/queue-name]"
        refs.append(ObjectRef("LocalQueue", queue, field))
    if placement is not None and stage != Stage.TRAIN:  # training runs as <run>-trainer, ours
        account = pod_context(ctx, stage, None).service_account
        if account:
            field = "spec.serviceAccountName"
            if not spec.service_account_name:
                field = f"nodePools.{placement.pool_name}.serviceAccountName"
            refs.append(ObjectRef("ServiceAccount", account, field))
    ca = spec.storage.ca_bundle
    if ca is not None and ca.config_map_name:
        refs.append(
            ObjectRef("ConfigMap", ca.config_map_name, "spec.storage.caBundle.configMapName")
        )
    runtime = training_runtime_ref(ctx, stage)
    if runtime is not None:
        refs.append(runtime)
    return tuple(refs)


def training_runtime_ref(ctx: StageContext, stage: Stage) -> ObjectRef | None:
    """The ClusterTrainingRuntime a TrainJob references: a TrainJob of a missing runtime is
    accepted by the API server and then fails; looked up first, it is named instead."""
    kind = runtime_kind(ctx.launcher)
    if stage != Stage.TRAIN or kind is None:
        return None
    field = "spec.training.runtimeRef"
    if not ctx.spec.training.runtime_ref:
        field = "the chart's training.runtime.name, as spec.training.runtimeRef is unset"
    return ObjectRef(kind, ctx.runtime, field)


def secret_fields(spec: DFlashRunSpec) -> dict[tuple[str, str], str]:
    """(kind, name) -> the spec field naming it, for the Secrets and ConfigMaps pods read."""
    fields: dict[tuple[str, str], str] = {}
    storage = spec.storage
    if storage.credentials_secret_ref is not None:
        name = storage.credentials_secret_ref.name
        fields[("Secret", name)] = "spec.storage.credentialsSecretRef.name"
    if spec.hf_token_secret_ref is not None:
        fields.setdefault(("Secret", spec.hf_token_secret_ref.name), "spec.hfTokenSecretRef.name")
    ca = storage.ca_bundle
    if ca is not None and ca.secret_name:
        fields.setdefault(("Secret", ca.secret_name), "spec.storage.caBundle.secretName")
    if ca is not None and ca.config_map_name:
        fields[("ConfigMap", ca.config_map_name)] = "spec.storage.caBundle.configMapName"
    return fields


def missing_from_pods(
    spec: DFlashRunSpec, pods: Sequence[PodView]
) -> tuple[ObjectRef, str, str] | None:
    """A Secret or ConfigMap (or a key of one) a pod waits for, from the kubelet's words,
    with the pod's name and what the kubelet said it in; None when no pod waits for one."""
    fields = secret_fields(spec)
    for pod in sorted(pods, key=lambda p: p.name):
        found = _from_config_error(pod) or _from_failed_mount(pod)
        if found is not None:
            kind, name, key, source = found
            field = fields.get((kind, name), "the stage's pod template")
            return ObjectRef(kind, name, field, key), pod.name, source
    return None


def _from_config_error(pod: PodView) -> tuple[str, str, str | None, str] | None:
    """(kind, name, key, source) from the kubelet's CreateContainerConfigError (env)."""
    message = pod.waiting_message or ""
    if pod.waiting_reason != CONFIG_ERROR or not message:
        return None
    if found := _NO_KEY.search(message):
        kind = "ConfigMap" if found.group(2) == "ConfigMap" else "Secret"
        return kind, found.group(3), found.group(1), CONFIG_ERROR
    if found := _NOT_FOUND.search(message):
        kind = "ConfigMap" if found.group(1).lower() == "configmap" else "Secret"
        return kind, found.group(2), None, CONFIG_ERROR
    return None


def _from_failed_mount(pod: PodView) -> tuple[str, str, str | None, str] | None:
    """(kind, name, key, source) from the kubelet's FailedMount events (volumes); the
    latest event that names a missing object or key wins."""
    if not pod.is_creating:
        return None
    volumes = {volume: (kind, name) for volume, kind, name in pod.volumes}
    for message in reversed(pod.mount_failures):
        mount = _MOUNT.match(message)
        if mount is None:
            continue
        volume, cause = mount.group(1), mount.group(2)
        if found := _NOT_FOUND.search(cause):
            kind = "ConfigMap" if found.group(1).lower() == "configmap" else "Secret"
            return kind, found.group(2), None, "FailedMount"
        if (found := _MOUNT_NO_KEY.search(cause)) and volume in volumes:
            kind, name = volumes[volume]
            return kind, name, found.group(1), "FailedMount"
    return None


def describe(ref: ObjectRef, namespace: str) -> str:
    """'Secret s3 (spec.storage.credentialsSecretRef.name) does not exist in namespace ns'."""
    where = "" if ref.kind in CLUSTER_SCOPED_KINDS else f" in namespace {namespace}"
    if ref.key is not None:
        return f"{ref.kind} {ref.name}{where} has no key {ref.key} (named by {ref.field})"
    return f"{ref.kind} {ref.name} (named by {ref.field}) does not exist{where}"


def mark_missing(
    draft: Draft, stage: Stage, missing: Sequence[ObjectRef], namespace: str, seen: str = ""
) -> None:
    """The stage's condition and the phase say what is missing (one Warning event, when the
    condition's reason changes); the run waits for it."""
    text = "; ".join(describe(ref, namespace) for ref in missing)
    message = Reason.OBJECT_MISSING.message(stage=stage.value, missing=text + seen)
    draft.set_condition(
        STAGE_CONDITIONS[stage], ConditionStatus.FALSE, Reason.OBJECT_MISSING, message
    )
    draft.set_phase(STAGE_PHASES[stage], message)


def mark_waiting_pods(
    ctx: StageContext, draft: Draft, stage: Stage, pods: Sequence[PodView]
) -> bool:
    """A pod of the stage waits for a missing Secret or ConfigMap: say so; True if one does.
    A pod waiting in ContainerCreating is looked at again soon (its events are not watched)."""
    if any(pod.is_creating for pod in pods):
        draft.requeue(CREATING_RECHECK_SECONDS)
    found = missing_from_pods(ctx.spec, pods)
    if found is None:
        return False
    ref, pod, source = found
    said = "FailedMount event" if source == "FailedMount" else source
    seen = f" (the kubelet's {said} on pod {pod})"
    mark_missing(draft, stage, [ref], ctx.run.namespace, seen)
    return True


def is_queue_unknown_to_kueue(child: ChildView, workload: WorkloadView | None) -> bool:
    """Kueue made the child's Workload but says its LocalQueue does not exist (its words,
    pkg/controller/core/workload_controller.go): missing, or an API Kueue cannot read."""
    return workload is not None and workload.message == KUEUE_NO_QUEUE.format(queue=child.queue)


def check_queued(
    ctx: StageContext, draft: Draft, stage: Stage, child: ChildView, observed: Observed
) -> tuple[ObjectRef, ...]:
    """A queued child Kueue has made no Workload for, or whose LocalQueue Kueue says does not
    exist: look its references up (once per pass) and return those that are missing, which
    is why Kueue cannot admit it. (An API that is not served is `Observed.not_served`.)"""
    refs = build_references(ctx, stage)
    workload = observed.workload_of(child)
    if not child.queue or not refs:
        return ()
    if workload is not None and not is_queue_unknown_to_kueue(child, workload):
        return ()
    if not observed.looked_up(refs):
        draft.act(LookUp(refs))
        return ()
    return observed.missing(refs)


def mark_unfinished(
    ctx: StageContext,
    draft: Draft,
    stage: Stage,
    attempt: int,
    child: ChildView,
    observed: Observed,
) -> None:
    """The conditions of a stage whose child has not finished: running (with its progress),
    queued in Kueue (in Kueue's words), or waiting for an object that does not exist."""
    pods = observed.pods_of(child)
    missing = check_queued(ctx, draft, stage, child, observed)
    waiting = not missing and mark_waiting_pods(ctx, draft, stage, pods)
    if not missing and not waiting:
        outcomes.mark_running(ctx, draft, stage, attempt, child, pods)
    if child.queue:
        unserved = observed.not_served(build_references(ctx, stage))
        outcomes.mark_queue(draft, stage, child, observed.workload_of(child), unserved)
    elif draft.condition(ConditionType.ADMITTED) is not None:
        draft.remove_condition(ConditionType.ADMITTED)
    if missing:
        seen = f"; Kueue cannot make a Workload for {child.kind} {child.name} without it"
        if observed.workload_of(child) is not None:
            seen = f"; Kueue cannot admit {child.kind} {child.name} without it"
        mark_missing(draft, stage, missing, ctx.run.namespace, seen)
