"""The training stage as a Kubeflow Trainer v2.3 TrainJob: a ClusterTrainingRuntime reference
plus the operator's own `runtimePatches` entry (the runtime is never edited), cut from the same
pod `children/pod.py` renders for the PyTorchJob. Observing it: `kinds.TrainJobKind`.
"""

from __future__ import annotations

from typing import Any

from dflash_operator.api.constants import Stage
from dflash_operator.api.naming import child_name
from dflash_operator.children import commands
from dflash_operator.children.jobs import deadline
from dflash_operator.children.kinds import TRAINJOB
from dflash_operator.children.launch import LaunchOptions
from dflash_operator.children.meta import build_child_labels, build_metadata
from dflash_operator.children.pod import PodContext, build_container, build_pod_template

# Our entry in spec.runtimePatches (a list keyed by manager): Kueue writes its own entry
# (kueue.x-k8s.io/manager) beside it, and neither touches the other's.
OPERATOR_MANAGER = "dflash.dev/operator"
RUNTIME_API_GROUP = TRAINJOB.group
RUNTIME_KIND = "ClusterTrainingRuntime"
# The replicated Job and the container of the trainer in torch runtimes (constants.Node).
TRAINER_NODE = "node"
# PodSpecPatch (trainjob_types.go, v2.3.0): the pod fields a runtime patch may set.
POD_PATCH_FIELDS = (
    "serviceAccountName",
    "volumes",
    "imagePullSecrets",
    "securityContext",
    "nodeSelector",
    "affinity",
    "tolerations",
)
# ContainerPatch: the container fields a runtime patch may set (besides its name). Not `env`:
# the Trainer's webhook refuses env in a patch of the trainer's `node` container ("must not
# have envs for the dataset-initializer, model-initializer, node containers"); it goes in
# `trainer.env`.
CONTAINER_PATCH_FIELDS = ("volumeMounts", "securityContext")
TRAINER_FIELDS = ("env",)
# What the shared pod has that neither the patch nor `trainer` can carry in v2.3: the runtime's
# (the chart's sets restart policy, service links, termination message policy; the token is
# mounted instead; a platform runtime decides scheduler and priority class, docs/operations.md).
RUNTIME_POD_FIELDS = (
    "restartPolicy",
    "enableServiceLinks",
    "automountServiceAccountToken",
    "schedulerName",
    "priorityClassName",
)
RUNTIME_CONTAINER_FIELDS = ("imagePullPolicy", "terminationMessagePolicy")
# The API token, mounted where client libraries look for it (what the ServiceAccount admission
# plugin mounts when automountServiceAccountToken is on; it adds none where a mount exists).
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"  # noqa: S105 - a path, no secret
# The kubelet refreshes a projected token well before this (the admission plugin's value).
TOKEN_SECONDS = 3607


def build_token_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    """(volume, mount) of the pod's API token: a runtime patch cannot set the pod's
    automountServiceAccountToken, and the trainer's account turns automount off (only the
    trainer talks to the API server), so its token is mounted explicitly."""
    sources = [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [
            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
        ]}},
    ]  # fmt: skip
    volume = {"name": "api-token", "projected": {"sources": sources}}
    return volume, {"name": "api-token", "mountPath": TOKEN_DIR, "readOnly": True}


def build_runtime_patch(ctx: PodContext, pod_template: dict[str, Any]) -> dict[str, Any]:
    """The operator's `runtimePatches` entry: labels of the JobSet (our watch finds it by
    them), and the trainer pods' labels, annotations (Kueue's topology request), placement,
    identity, volumes and security context (env goes in `trainer.env`)."""
    pod_spec = dict(pod_template["spec"])
    container = dict(pod_spec["containers"][0])
    if ctx.mount_token:
        volume, mount = build_token_volume()
        pod_spec["volumes"] = [*pod_spec.get("volumes", []), volume]
        container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
    container_patch: dict[str, Any] = {"name": TRAINER_NODE}
    container_patch.update({k: container[k] for k in CONTAINER_PATCH_FIELDS if k in container})
    spec_patch: dict[str, Any] = {k: pod_spec[k] for k in POD_PATCH_FIELDS if k in pod_spec}
    spec_patch["containers"] = [container_patch]
    replicated_job = {
        "name": TRAINER_NODE,
        "template": {
            "spec": {"template": {"metadata": pod_template["metadata"], "spec": spec_patch}}
        },
    }
    jobset_labels = build_child_labels(ctx.run, ctx.stage, ctx.attempt)
    return {
        "manager": OPERATOR_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": jobset_labels},
                "spec": {"replicatedJobs": [replicated_job]},
            }
        },
    }


class TrainJobLauncher:
    """`trainer.kubeflow.org/v1alpha1` TrainJob on a ClusterTrainingRuntime (torch, JobSet):
    `trainer` carries image, args, nodes, processes and resources; the rest is our patch.

    Restarts are new attempts: the runtime's JobSet fails on the first pod failure, and the
    operator creates the next TrainJob (which resumes from the newest checkpoint) while
    spec.training.maxRestarts allows; the runtime's own failurePolicy is not ours to set."""

    kind = TRAINJOB
    restarts_in_place = False
    runtime_kind = RUNTIME_KIND

    def build(
        self, ctx: PodContext, run_root: str, options: LaunchOptions, suspend: bool
    ) -> dict[str, Any]:
        name = child_name(ctx.run.name, Stage.TRAIN, ctx.attempt or 1)
        container = build_container(ctx, TRAINER_NODE, commands.build_train_args(run_root))
        template = build_pod_template(ctx, container, restart_policy="Never")
        trainer = {
            "image": container["image"],
            "args": container["args"],
            "numNodes": ctx.spec.training.nodes,
            "numProcPerNode": ctx.placement.processes,
            "resourcesPerNode": container["resources"],
            **{k: container[k] for k in TRAINER_FIELDS if k in container},
        }
        return {
            "apiVersion": TRAINJOB.api_version,
            "kind": TRAINJOB.kind,
            "metadata": build_metadata(
                ctx.run, name, Stage.TRAIN, ctx.attempt, labels=ctx.workload_labels
            ),
            "spec": {
                "runtimeRef": {
                    "name": options.runtime,
                    "apiGroup": RUNTIME_API_GROUP,
                    "kind": RUNTIME_KIND,
                },
                "trainer": trainer,
                "runtimePatches": [build_runtime_patch(ctx, template)],
                # Created suspended when queued: Kueue admits and resumes it; the operator
                # never writes `suspend` of a queued TrainJob again.
                "suspend": suspend,
                **deadline(ctx),
            },
        }
