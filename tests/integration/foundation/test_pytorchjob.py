"""The real Kubeflow training-operator turns a PyTorchJob into pods with torchrun's env."""

from __future__ import annotations

from typing import Any

import yaml
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.pytest_plugin import ClusterHandle

RTX = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


def replica(replicas: int) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {
            "spec": {
                "nodeSelector": {"nvidia.com/gpu.product": RTX},
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                ],
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "pytorch",
                        "command": ["python", "-c", "pass"],
                        "ports": [{"name": "pytorchjob-port", "containerPort": 23456}],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            }
        },
    }


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "pytorch")
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_pytorchjob_with_master_and_two_workers_runs_on_the_pool_and_succeeds(
    cluster: ClusterHandle, namespace: str
) -> None:
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp"},
        "spec": {
            "nprocPerNode": "1",
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)},
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))

    def three_pods() -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = get_json(
            cluster, "pods", "-n", namespace, "-l", "training.kubeflow.org/job-name=ddp"
        )["items"]
        return pods if len(pods) == 3 else []

    pods = wait_for("the training-operator to create 3 pods", three_pods)
    by_name = {p["metadata"]["name"]: p for p in pods}
    assert set(by_name) == {"ddp-master-0", "ddp-worker-0", "ddp-worker-1"}
    for name, expected_rank in (
        ("ddp-master-0", "0"),
        ("ddp-worker-0", "1"),
        ("ddp-worker-1", "2"),
    ):
        env = env_of(by_name[name])
        assert env["MASTER_ADDR"] == "ddp-master-0"
        assert env["MASTER_PORT"] == "23456"
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == expected_rank

    def succeeded() -> bool:
        status = get_json(cluster, "pytorchjob", "ddp", "-n", namespace).get("status", {})
        return any(
            c["type"] == "Succeeded" and c["status"] == "True" for c in status.get("conditions", [])
        )

    wait_for("the PyTorchJob to succeed", succeeded, timeout=90)
    for pod in get_json(
        cluster, "pods", "-n", namespace, "-l", "training.kubeflow.org/job-name=ddp"
    )["items"]:
        node = get_json(cluster, "node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == RTX
