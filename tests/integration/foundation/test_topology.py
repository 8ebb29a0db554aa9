"""Kueue's topology-aware scheduling on the local cluster's fake GPU nodes: a gang that asks for
one rack gets one rack when two racks have room, and a gang that fits no single rack waits with
Kueue's reason instead of spreading. These test the cluster (Topology, flavors, node labels);
the operator's own topology annotation is tested with the operator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from dflash_dev import topology
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.nodes import HOSTNAME_LABEL, RACK_LABEL
from dflash_dev.pytest_plugin import ClusterHandle

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
FLAVOR = topology.flavor_name("b200")
GPUS_PER_NODE = 8  # a B200 node's GPUs: one pod per node


@pytest.fixture
def rack_queue(cluster: ClusterHandle, namespace: str) -> Iterator[str]:
    """A ClusterQueue on the topology-aware B200 flavor with quota for all 4 nodes (so quota is
    never what holds a gang back), for this namespace only, and its LocalQueue."""
    cluster_queue = f"tas-{namespace[-6:]}"
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": cluster_queue},
         "spec": {
             "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
             "resourceGroups": [{
                 "coveredResources": ["nvidia.com/gpu"],
                 "flavors": [{"name": FLAVOR, "resources": [
                     {"name": "nvidia.com/gpu", "nominalQuota": 4 * GPUS_PER_NODE}]}],
             }]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "racks", "namespace": namespace},
         "spec": {"clusterQueue": cluster_queue}},
    ]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    yield "racks"
    cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)


def gang(name: str, pods: int, queue: str) -> dict[str, Any]:
    """A batch Job of `pods` pods that run together, one whole B200 node each, held Running
    (kwok), that requires one rack."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "suspend": True,
            "template": {
                "metadata": {
                    "labels": {"kwok.dflash.dev/hold": "true"},
                    "annotations": {REQUIRED_TOPOLOGY: RACK_LABEL},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["sleep", "infinity"],
                            "resources": {"limits": {"nvidia.com/gpu": str(GPUS_PER_NODE)}},
                        }
                    ],
                },
            },
        },
    }


def workload_of(cluster: ClusterHandle, namespace: str, job: str) -> dict[str, Any] | None:
    for workload in get_json(cluster, "workloads", "-n", namespace)["items"]:
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "Job" and o["name"] == job for o in owners):
            return dict(workload)
    return None


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return None


def running_pods(cluster: ClusterHandle, namespace: str, job: str, count: int) -> Any:
    pods = get_json(cluster, "pods", "-n", namespace, "-l", f"job-name={job}")["items"]
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    return running if len(running) == count else None


def assigned_nodes(assignment: dict[str, Any]) -> set[str]:
    """The nodes of a pod set's topology assignment. Kueue 0.19 stores only the lowest level
    when it is the hostname (the others follow from the node), as slices: `{"levels":
    [hostname], "slices": [{"domainCount": n, "valuesPerLevel": [{"universal": node} or
    {"individual": {"prefix": "b200-", "roots": ["0", "1"], "suffix"?}}]}]}`."""
    found = assignment["topologyAssignment"]
    assert found["levels"] == [HOSTNAME_LABEL], found
    names: set[str] = set()
    for piece in found["slices"]:
        (values,) = piece["valuesPerLevel"]
        if "universal" in values:
            names.add(values["universal"])
        else:
            each = values["individual"]
            prefix, suffix = each.get("prefix", ""), each.get("suffix", "")
            names.update(f"{prefix}{root}{suffix}" for root in each["roots"])
    return names


def delete_and_wait(cluster: ClusterHandle, namespace: str, kind: str, name: str) -> None:
    """Free the nodes for the next test (the namespace itself goes in the background)."""
    cluster.kubectl("delete", kind, name, "-n", namespace, "--cascade=foreground", "--wait=true")
    wait_for(
        f"the pods of {kind} {name} to go",
        lambda: not get_json(cluster, "pods", "-n", namespace)["items"],
        60,
    )


def racks_by_node(cluster: ClusterHandle) -> dict[str, str]:
    nodes = get_json(cluster, "nodes", "-l", RACK_LABEL)["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"][RACK_LABEL] for n in nodes}


def test_a_two_node_gang_that_requires_a_rack_lands_inside_one_rack_when_two_racks_have_room(
    cluster: ClusterHandle, namespace: str, rack_queue: str
) -> None:
    racks = racks_by_node(cluster)
    b200_racks = {racks[f"b200-{i}"] for i in range(4)}
    assert len(b200_racks) == 2, f"the B200 nodes should sit in two racks: {racks}"

    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(gang("pair", 2, rack_queue))
    )
    pods = wait_for(
        "both pods of the gang Running", lambda: running_pods(cluster, namespace, "pair", 2), 90
    )

    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2, f"one whole node per pod: {nodes}"
    assert len({racks[n] for n in nodes}) == 1, f"the gang spread over racks: {nodes}"
    # Kueue placed them, not the scheduler: its ungater pinned each pod to its assigned node
    # (the lowest level, the hostname, is all it sets).
    for pod in pods:
        assert pod["spec"]["nodeSelector"][HOSTNAME_LABEL] == pod["spec"]["nodeName"]
    workload = workload_of(cluster, namespace, "pair")
    assert workload is not None
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"]["nvidia.com/gpu"] == FLAVOR
    assert assigned_nodes(assignment) == nodes
    delete_and_wait(cluster, namespace, "job", "pair")


def test_a_gang_that_fits_no_single_rack_waits_with_kueues_reason_and_does_not_spread(
    cluster: ClusterHandle, namespace: str, rack_queue: str
) -> None:
    # 3 whole nodes: a rack has 2, the cluster 4 (and the queue's quota covers all 4).
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(gang("trio", 3, rack_queue))
    )

    def refused() -> dict[str, Any] | None:
        workload = workload_of(cluster, namespace, "trio")
        reserved = condition(workload, "QuotaReserved") if workload else None
        if reserved and reserved["status"] == "False" and "topology" in reserved["message"]:
            return reserved
        return None

    reserved = wait_for("Kueue to refuse the gang a rack", refused, 60)
    # "topology ... allows to fit only 2 out of 3 pod(s)" (or "doesn't allow to fit any").
    assert f'topology "{topology.TOPOLOGY_NAME}"' in reserved["message"]
    assert "3 pod(s)" in reserved["message"], reserved["message"]
    assert reserved["reason"] == "Pending"
    job = get_json(cluster, "job", "trio", "-n", namespace)
    assert job["spec"]["suspend"] is True
    pods = get_json(cluster, "pods", "-n", namespace, "-l", "job-name=trio")["items"]
    assert pods == [], "a refused gang must not start any pod"


def trainjob(name: str, queue: str) -> dict[str, Any]:
    """A 2-node TrainJob of the platform's torch-distributed runtime, one whole B200 node per
    node, queued, asking for one rack through a runtime patch of its pod template (the way
    the operator patches a runtime it does not own)."""
    pod_patch = {
        "metadata": {"annotations": {REQUIRED_TOPOLOGY: RACK_LABEL}},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": 2,
                "image": "busybox",
                "command": ["true"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(GPUS_PER_NODE)}},
            },
            "runtimePatches": [
                {
                    "manager": "dflash.dev/test",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {"name": "node", "template": {"spec": {"template": pod_patch}}}
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


def test_a_queued_trainjob_that_requires_a_rack_runs_through_jobset_inside_one_rack(
    cluster: ClusterHandle, namespace: str, rack_queue: str
) -> None:
    if cluster.kubectl("get", "crd", "trainjobs.trainer.kubeflow.org", check=False).returncode:
        pytest.skip("this cluster does not serve Kubeflow Trainer v2 (DFLASH_CLUSTER_BACKENDS)")
    racks = racks_by_node(cluster)
    manifest = yaml.safe_dump(trainjob("tj", rack_queue))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)

    def complete() -> dict[str, Any] | None:
        job = get_json(cluster, "trainjob", "tj", "-n", namespace)
        done = condition(job, "Complete")
        return job if done and done["status"] == "True" else None

    wait_for("the TrainJob to complete", complete, 120)
    pods = get_json(cluster, "pods", "-n", namespace, "-l", "jobset.sigs.k8s.io/jobset-name=tj")
    nodes = {p["spec"]["nodeName"] for p in pods["items"]}
    assert len(nodes) == 2, f"one whole node per pod: {nodes}"
    assert len({racks[n] for n in nodes}) == 1, f"the TrainJob spread over racks: {nodes}"
    workloads = get_json(cluster, "workloads", "-n", namespace)["items"]
    (workload,) = [
        w for w in workloads
        if any(o["kind"] == "TrainJob" for o in w["metadata"].get("ownerReferences") or [])
    ]  # fmt: skip
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"]["nvidia.com/gpu"] == FLAVOR
    assert assigned_nodes(assignment) == nodes
    delete_and_wait(cluster, namespace, "trainjob", "tj")
