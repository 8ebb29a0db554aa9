"""A PyTorchJob (Master + Worker) runs through the real training-operator: the ranks find each
other through the MASTER_ADDR the executor resolves, and a gloo all_reduce succeeds."""

from __future__ import annotations

from typing import Any

from dflash_dev.executor.testing import LocalExecutor
from dflash_dev.kube_wait import get_json, wait_for

ALL_REDUCE = """
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {value.item():g}", flush=True)
open("/dev/termination-log", "w").write(f"{value.item():g}")
dist.destroy_process_group()
"""
# torch's import alone takes seconds on a small machine; two ranks start side by side.
JOB_SECONDS = 120


def replica(executor: LocalExecutor) -> dict[str, Any]:
    template = executor.template(["python", "-c", ALL_REDUCE])
    container = template["spec"]["containers"][0]
    container["name"] = "pytorch"  # the training-operator injects env into this container
    container["ports"] = [{"name": "pytorchjob-port", "containerPort": 23456}]
    del template["spec"]["restartPolicy"]
    return {"replicas": 1, "restartPolicy": "OnFailure", "template": template}


def pytorchjob(executor: LocalExecutor, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(executor), "Worker": replica(executor)}},
    }


def succeeded(executor: LocalExecutor, namespace: str, name: str) -> bool:
    status = get_json(executor.cluster, "pytorchjob", name, "-n", namespace).get("status", {})
    return any(
        c["type"] == "Succeeded" and c["status"] == "True" for c in status.get("conditions") or []
    )


def test_two_pytorchjobs_on_the_same_port_both_all_reduce_over_gloo_and_succeed(
    executor: LocalExecutor, namespace: str
) -> None:
    # Both masters declare port 23456 and torch's TCPStore listens on the wildcard address:
    # only the executor's per-pod rendezvous port keeps them apart.
    executor.apply(namespace, pytorchjob(executor, "ddp-a"), pytorchjob(executor, "ddp-b"))

    def both_succeeded() -> bool:
        return all(succeeded(executor, namespace, job) for job in ("ddp-a", "ddp-b"))

    try:
        wait_for("both PyTorchJobs to succeed", both_succeeded, JOB_SECONDS)
    except AssertionError as exc:
        stories = [executor.describe(namespace, f"{job}-worker-0") for job in ("ddp-a", "ddp-b")]
        raise AssertionError("\n".join([str(exc), *stories])) from None
    for job in ("ddp-a", "ddp-b"):
        master = executor.get_pod(namespace, f"{job}-master-0")
        worker = executor.get_pod(namespace, f"{job}-worker-0")
        for pod in (master, worker):
            terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            assert terminated["message"] == "3"  # 1 + 2: both ranks of this job took part
        assert "rank 1 of 2: sum 3" in executor.logs(namespace, f"{job}-worker-0")
        assert master["status"]["podIP"] != worker["status"]["podIP"]
        # The worker's init container (it waits for the master's DNS name) is skipped, and
        # reported completed so that the pod is Initialized.
        assert worker["spec"].get("initContainers"), "training-operator added no init container"
        for init in worker["status"]["initContainerStatuses"]:
            assert init["state"]["terminated"]["reason"] == "Completed"
