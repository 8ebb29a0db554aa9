"""The training stage as a Kubeflow Trainer v2 TrainJob: everything per run goes through the
operator's own `runtimePatches` entry (never the runtime), the pod is the PyTorchJob's pod,
Kueue's labels and suspend are where Kueue reads them, the topology request reaches the gang,
and every render fits the Trainer v2.3.0 CRD schema (no field the API server would prune)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from dflash_dev import openapi_check, third_party_crds
from dflash_operator.api.constants import Stage
from dflash_operator.api.naming import (
    MAX_ATTEMPT,
    MAX_RUN_NAME_LENGTH,
    MAX_TRAINING_NODES,
    child_name,
)
from dflash_operator.api.spec_training import Launcher
from dflash_operator.api.validation import parse_spec
from dflash_operator.children import trainjob
from dflash_operator.children.kinds import TRAINJOB, summarize_child, summarize_pod
from dflash_operator.children.meta import RunRef
from dflash_operator.children.trainjob import OPERATOR_MANAGER
from dflash_operator.plan.placement import place_stages
from dflash_operator.plan.stages import (
    PlanSettings,
    StageContext,
    build_pipeline,
    build_stage_child,
)
from dflash_operator.pools import PoolsConfig, parse_pools

from .conftest import POOLS

RUN = RunRef("r1", "ml", "uid-1")
ROOT = "s3://artifacts/dflash/ml/r1/uid-1"


@cache
def trainjob_schema() -> dict[str, Any]:
    trainjobs = third_party_crds.ensure("kubeflow-trainer")[0]
    return openapi_check.crd_schema(trainjobs, TRAINJOB.version)


@pytest.fixture
def render(
    pools: PoolsConfig, make_spec: Callable[..., dict[str, Any]]
) -> Callable[..., dict[str, Any]]:
    def make(
        attempt: int = 1, suspend: bool = False, pools_: PoolsConfig | None = None, **overrides: Any
    ) -> dict[str, Any]:
        spec = parse_spec(make_spec(**overrides))
        placements, errors = place_stages(spec, build_pipeline(spec), pools_ or pools)
        assert not errors
        settings = PlanSettings(trainer_image="trainer:1", training_runtime="dflash-torch")
        launcher = spec.training.launcher or Launcher.TRAINJOB
        ctx = StageContext(RUN, spec, ROOT, placements, settings, launcher=launcher)
        return build_stage_child(ctx, Stage.TRAIN, attempt, suspend)

    return make


def patch_of(job: dict[str, Any], manager: str = OPERATOR_MANAGER) -> dict[str, Any]:
    (patch,) = [p for p in job["spec"]["runtimePatches"] if p["manager"] == manager]
    return dict(patch["trainingRuntimeSpec"]["template"])


def pod_patch(job: dict[str, Any]) -> dict[str, Any]:
    (node,) = patch_of(job)["spec"]["replicatedJobs"]
    assert node["name"] == "node"
    return dict(node["template"]["spec"]["template"])


def test_training_is_a_trainjob_on_the_charts_runtime_with_nodes_processes_and_resources(
    render: Callable[..., dict[str, Any]],
) -> None:
    job = render(training={"nodes": 3, "launcher": "trainjob"})
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert job["metadata"]["name"] == "r1-train"
    assert job["spec"]["runtimeRef"] == {
        "name": "dflash-torch",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 3 and trainer["numProcPerNode"] == 4
    assert trainer["image"] == "trainer:1"
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "4"
    assert trainer["args"][:5] == ["python", "-m", "torch.distributed.run", "--module",
                                   "dflash_trainer.train"]  # fmt: skip
    # torchrun reads PET_*: the Trainer's torch plugin sets them; the operator never does.
    assert not [e for e in trainer["env"] if e["name"].startswith("PET_")]


def test_a_runtime_ref_names_the_platforms_own_runtime(
    render: Callable[..., dict[str, Any]],
) -> None:
    job = render(training={"launcher": "trainjob", "runtimeRef": "torch-distributed"})
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"


def test_everything_per_run_goes_through_the_operators_runtime_patch(
    render: Callable[..., dict[str, Any]],
) -> None:
    job = render(training={"nodes": 2, "launcher": "trainjob"})
    assert [p["manager"] for p in job["spec"]["runtimePatches"]] == ["dflash.dev/operator"]
    template = pod_patch(job)
    pod = template["spec"]
    # Node-pool pinning and tolerations.
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    }
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    # The trainer's own account, scoped to its run.
    assert pod["serviceAccountName"] == "r1-trainer"
    # Restricted pod security, on the pod and the container.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["name"] == "node"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # Volumes and their mounts; env (credentials only by reference) in `trainer.env`: the
    # Trainer's webhook refuses env in a patch of the `node` container.
    assert {v["name"] for v in pod["volumes"]} >= {"config", "tmp", "dshm"}
    assert {m["name"] for m in container["volumeMounts"]} >= {"config", "tmp", "dshm"}
    assert "env" not in container
    env = {e["name"]: e for e in job["spec"]["trainer"]["env"]}
    assert env["DFLASH_RUN_NAME"]["value"] == "r1"
    assert "valueFrom" in env["AWS_ACCESS_KEY_ID"] and "value" not in env["AWS_ACCESS_KEY_ID"]
    # Our labels on the pods and on the JobSet (the operator's watches select by them).
    assert template["metadata"]["labels"]["dflash.dev/stage"] == "train"
    jobset_labels = patch_of(job)["metadata"]["labels"]
    assert jobset_labels["app.kubernetes.io/managed-by"] == "dflash-operator"
    assert jobset_labels["dflash.dev/run-uid"] == "uid-1"


def test_kueue_reads_its_queue_from_the_trainjob_which_starts_suspended_when_queued(
    render: Callable[..., dict[str, Any]],
) -> None:
    job = render(suspend=True, training={"launcher": "trainjob"})
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert job["spec"]["suspend"] is True
    assert render(training={"launcher": "trainjob"})["spec"]["suspend"] is False


def test_a_stage_deadline_becomes_the_trainjobs_active_deadline(
    render: Callable[..., dict[str, Any]],
) -> None:
    job = render(training={"launcher": "trainjob", "activeDeadlineSeconds": 7200})
    assert job["spec"]["activeDeadlineSeconds"] == 7200


@pytest.mark.parametrize("mode", ["required", "preferred"])
def test_a_pools_topology_reaches_the_training_gang_on_both_backends(
    render: Callable[..., dict[str, Any]], make_spec: Callable[..., dict[str, Any]], mode: str
) -> None:
    raw = {**POOLS, "nodePools": dict(POOLS["nodePools"])}
    raw["nodePools"]["rtx-pro-6000"] = {
        **POOLS["nodePools"]["rtx-pro-6000"],
        "topology": {"levelLabel": "cloud.example.com/rack", "mode": mode},
    }
    pools = parse_pools(raw)
    wanted = {f"kueue.x-k8s.io/podset-{mode}-topology": "cloud.example.com/rack"}
    trainjob = render(pools_=pools, training={"launcher": "trainjob", "nodes": 2})
    assert pod_patch(trainjob)["metadata"]["annotations"] == wanted
    pytorchjob = render(pools_=pools, training={"launcher": "pytorchjob", "nodes": 2})
    for replica in ("Master", "Worker"):
        template = pytorchjob["spec"]["pytorchReplicaSpecs"][replica]["template"]
        assert template["metadata"]["annotations"] == wanted


def test_a_topology_is_only_for_the_training_gang(make_spec: Callable[..., dict[str, Any]]) -> None:
    raw = {**POOLS, "nodePools": dict(POOLS["nodePools"])}
    raw["nodePools"]["b200"] = {**POOLS["nodePools"]["b200"],
                                "topology": {"levelLabel": "cloud.example.com/rack"}}  # fmt: skip
    pools = parse_pools(raw)
    spec = parse_spec(make_spec())
    placements, _ = place_stages(spec, build_pipeline(spec), pools)
    ctx = StageContext(RUN, spec, ROOT, placements, PlanSettings())
    regen = build_stage_child(ctx, Stage.REGEN, 1, False)
    assert "annotations" not in regen["spec"]["template"]["metadata"]


def test_a_topology_names_a_label_and_a_known_mode() -> None:
    raw = {**POOLS, "nodePools": dict(POOLS["nodePools"])}
    raw["nodePools"]["cpu"] = {"topology": {"levelLabel": "rack", "mode": "strict"}}
    with pytest.raises(ValueError, match=r"topology\.mode='strict' is not accepted"):
        parse_pools(raw)


@pytest.mark.parametrize(
    "training",
    [
        {"launcher": "trainjob"},
        {"launcher": "trainjob", "nodes": 4, "gpusPerNode": 2, "activeDeadlineSeconds": 60},
        {"launcher": "trainjob", "runtimeRef": "torch-distributed", "nodes": 1},
    ],
    ids=["defaults", "multi-node-deadline", "platform-runtime"],
)
def test_every_trainjob_render_fits_the_trainer_v2_3_crd_schema(
    render: Callable[..., dict[str, Any]], training: dict[str, Any]
) -> None:
    job = render(suspend=True, training=training)
    assert openapi_check.validate(job, trainjob_schema()) == []


def test_the_schema_check_finds_a_field_the_api_server_would_prune() -> None:
    bad = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {},
           "spec": {"runtimeRef": {"name": "x"},
                    "trainer": {"numNodes": "2", "resources": {}}}}  # fmt: skip
    errors = openapi_check.validate(bad, trainjob_schema())
    assert ".spec.trainer.numNodes: str where integer is expected" in errors
    assert ".spec.trainer.resources: unknown field (the API server would prune it)" in errors


def trainjob_body(conditions: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": "r1-train", "uid": "tj-uid",
            "labels": {"dflash.dev/stage": "train", "dflash.dev/attempt": "1"},
        },
        "spec": {"suspend": True, "activeDeadlineSeconds": 60},
        "status": {"conditions": conditions, "jobsStatus": jobs},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("conditions", "done", "ok", "message"),
    [
        ([], False, False, ""),
        ([{"type": "Suspended", "status": "True", "reason": "Suspended"}], False, False, ""),
        ([{"type": "Complete", "status": "True", "message": "jobset completed"}],
         True, True, "jobset completed"),
        ([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
           "message": "past its deadline"}], True, False, "DeadlineExceeded: past its deadline"),
        ([{"type": "Failed", "status": "False"}], False, False, ""),
    ],
    ids=["created", "suspended", "complete", "failed", "not-failed"],
)  # fmt: skip
def test_a_trainjob_is_observed_from_its_v2_3_conditions(
    conditions: list[dict[str, Any]], done: bool, ok: bool, message: str
) -> None:
    view = summarize_child(trainjob_body(conditions, []))
    assert view is not None
    assert (view.finished.done, view.finished.ok, view.finished.message) == (done, ok, message)
    assert view.finished.final is (message.startswith("DeadlineExceeded"))
    assert view.suspended is True and view.active_deadline_seconds == 60


def test_a_trainjobs_counts_come_from_its_jobsets_jobs() -> None:
    jobs = [{"name": "node", "active": 1, "ready": 1, "succeeded": 0, "failed": 2}]
    view = summarize_child(trainjob_body([], jobs))
    assert view is not None and (view.active, view.failed) == (1, 2)


def test_a_trainjobs_deadline_is_immutable_and_never_patched() -> None:
    assert TRAINJOB.deadline_mutable is False


def test_a_trainjob_pod_names_its_jobset_and_rank() -> None:
    pod = {
        "metadata": {
            "name": "r1-train-node-0-1-abcde", "uid": "p1",
            "labels": {
                "dflash.dev/stage": "train", "dflash.dev/attempt": "2",
                "jobset.sigs.k8s.io/jobset-name": "r1-train-2",
                "jobset.sigs.k8s.io/jobset-uid": "js-uid",
                "batch.kubernetes.io/job-name": "r1-train-2-node-0",
                "batch.kubernetes.io/job-completion-index": "1",
            },
            "ownerReferences": [{"controller": True, "uid": "job-uid", "kind": "Job"}],
        },
        "status": {"phase": "Running"},
    }  # fmt: skip
    view = summarize_pod(pod)
    assert view is not None
    assert (view.owner_name, view.jobset_uid, view.replica_type) == ("r1-train-2", "js-uid",
                                                                      "worker")  # fmt: skip


def test_the_longest_run_name_leaves_room_for_every_trainjob_hostname() -> None:
    """JobSet names the Job `<trainjob>-node-0` and each pod's hostname `<job>-<index>`: a DNS
    label, as long as the PyTorchJob's longest Service name, so the run-name limit holds."""
    trainjob = child_name("r" * MAX_RUN_NAME_LENGTH, Stage.TRAIN, MAX_ATTEMPT)
    hostname = f"{trainjob}-node-0-{MAX_TRAINING_NODES - 1}"
    assert len(hostname) <= 63


def test_the_trainer_gets_its_api_token_although_a_patch_cannot_turn_automount_on(
    render: Callable[..., dict[str, Any]],
) -> None:
    """The per-run account has automountServiceAccountToken false, and a runtime patch cannot
    set the pod's: the token is a projected volume at the path client libraries read."""
    pod = pod_patch(render(training={"launcher": "trainjob"}))["spec"]
    (token,) = [v for v in pod["volumes"] if v["name"] == "api-token"]
    kinds = [next(iter(source)) for source in token["projected"]["sources"]]
    assert kinds == ["serviceAccountToken", "configMap", "downwardAPI"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "api-token"]
    assert mount == {"name": "api-token", "readOnly": True,
                     "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}  # fmt: skip


@pytest.mark.parametrize(
    "overrides",
    [{}, {"priorityClassName": "ml-batch", "imagePullSecrets": [{"name": "pull"}]}],
    ids=["defaults", "priority-and-pull-secrets"],
)
def test_every_field_of_the_shared_pod_is_carried_or_named_as_the_runtimes(
    pools: PoolsConfig, make_spec: Callable[..., dict[str, Any]], overrides: dict[str, Any]
) -> None:
    """A field the shared pod gains (children/pod.py) must reach TrainJob pods, or be named as
    the runtime's: nothing is dropped silently."""
    spec = parse_spec(make_spec(training={"launcher": "pytorchjob"}, **overrides))
    placements, _ = place_stages(spec, build_pipeline(spec), pools)
    ctx = StageContext(RUN, spec, ROOT, placements, PlanSettings())
    pod = build_stage_child(ctx, Stage.TRAIN, 1, False)["spec"]["pytorchReplicaSpecs"]["Master"][
        "template"]["spec"]  # fmt: skip
    carried = {*trainjob.POD_PATCH_FIELDS, *trainjob.RUNTIME_POD_FIELDS, "containers"}
    assert set(pod) <= carried, set(pod) - carried
    container_fields = {
        "name", "image", "args", "resources", "ports",  # `trainer`, or the torch plugin's port
        *trainjob.CONTAINER_PATCH_FIELDS, *trainjob.TRAINER_FIELDS,
        *trainjob.RUNTIME_CONTAINER_FIELDS,
    }  # fmt: skip
    assert set(pod["containers"][0]) <= container_fields
