"""The local control plane is real: version, readiness, scheduling onto GPU pools, GC."""

from __future__ import annotations

import json
from typing import Any

import yaml
from dflash_dev import binaries
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.pytest_plugin import ClusterHandle


def gpu_job(name: str, *, gpus: int = 8, tolerate: bool = True) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"},
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "command": ["true"],
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ],
    }
    if tolerate:
        pod_spec["tolerations"] = [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": pod_spec}},
    }


def apply(cluster: ClusterHandle, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))


def pods_of_job(cluster: ClusterHandle, namespace: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(
        cluster, "pods", "-n", namespace, "-l", f"job-name={job}"
    )["items"]
    return items


def test_apiserver_reports_the_version_that_was_built_and_is_ready(cluster: ClusterHandle) -> None:
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == binaries.version_of("kube-apiserver")
    assert version["serverVersion"]["gitTreeState"] == "clean"
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_gpu_job_is_scheduled_onto_a_b200_node_and_completes(
    cluster: ClusterHandle, namespace: str
) -> None:
    apply(cluster, namespace, gpu_job("on-b200"))
    wait_for(
        "the Job to complete",
        lambda: get_json(cluster, "job", "on-b200", "-n", namespace)["status"].get("succeeded"),
    )
    (pod,) = pods_of_job(cluster, namespace, "on-b200")
    node = get_json(cluster, "node", pod["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-B200"
    assert pod["status"]["phase"] == "Succeeded"


def _pending_reason(cluster: ClusterHandle, namespace: str, job: str) -> str:
    def unschedulable() -> str:
        pods = pods_of_job(cluster, namespace, job)
        for pod in pods:
            for cond in pod.get("status", {}).get("conditions", []):
                if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return str(cond.get("message", ""))
        return ""

    message: str = wait_for(f"{job} to be reported unschedulable", unschedulable)
    (pod,) = pods_of_job(cluster, namespace, job)
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")
    return message


def test_gpu_job_without_the_toleration_stays_pending(
    cluster: ClusterHandle, namespace: str
) -> None:
    apply(cluster, namespace, gpu_job("no-toleration", tolerate=False))
    message = _pending_reason(cluster, namespace, "no-toleration")
    assert "untolerated taint" in message


def test_job_asking_for_16_gpus_per_pod_stays_pending(
    cluster: ClusterHandle, namespace: str
) -> None:
    apply(cluster, namespace, gpu_job("too-many-gpus", gpus=16))
    message = _pending_reason(cluster, namespace, "too-many-gpus")
    assert "Insufficient nvidia.com/gpu" in message


def test_deleting_an_owner_deletes_its_owned_job(cluster: ClusterHandle, namespace: str) -> None:
    apply(
        cluster, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}
    )
    owner = get_json(cluster, "configmap", "owner", "-n", namespace)
    job = gpu_job("owned")
    job["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    ]
    apply(cluster, namespace, job)
    cluster.kubectl("get", "job", "owned", "-n", namespace)
    cluster.kubectl("delete", "configmap", "owner", "-n", namespace)
    wait_for(
        "the garbage collector to delete the Job",
        lambda: (
            cluster.kubectl("get", "job", "owned", "-n", namespace, check=False).returncode != 0
        ),
    )
