"""TrainJobs of the chart's ClusterTrainingRuntime run through the real Kubeflow Trainer and
JobSet controllers: torchrun in each JobSet pod takes the PET_* env of the Trainer's torch
plugin, the ranks find rank 0 by its pod DNS name (`<trainjob>-node-0-0.<trainjob>`, a pod
hostname under JobSet's headless Service, which the executor resolves), and a gloo all_reduce
succeeds in two TrainJobs at once on the same rendezvous port."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from dflash_dev import operator_local
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
print("master", os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], flush=True)
open("/dev/termination-log", "w").write(f"{value.item():g}")
dist.destroy_process_group()
"""
# torch's import alone takes seconds on a small machine; four ranks start side by side.
JOB_SECONDS = 180
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture(scope="module")
def runtime(executor: LocalExecutor) -> str:
    """The chart's ClusterTrainingRuntime, as the demo and the operator tests install it."""
    if not operator_local.serves_trainer_v2(executor.kubeconfig):
        pytest.skip("the local cluster does not serve Kubeflow Trainer v2")
    body = operator_local.chart_runtime()
    assert body is not None
    executor.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                             input=yaml.safe_dump(body))  # fmt: skip
    return str(body["metadata"]["name"])


def trainjob(executor: LocalExecutor, name: str, runtime: str) -> dict[str, Any]:
    placement = {"spec": {"template": {"spec": executor.placement()}}}
    patch = {
        "manager": "dflash.dev/executor-test",
        "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": "node", "template": placement}]}}
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": runtime, "apiGroup": "trainer.kubeflow.org",
                           "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "image": "trainer:1",
                # As the operator's TrainJobs: no command (the runtime has none), torchrun in
                # the args; --no-python runs `python -c` as the worker.
                "args": ["python", "-m", "torch.distributed.run", "--no-python",
                         "python", "-c", ALL_REDUCE],
                "numNodes": 2,
                "numProcPerNode": 1,
                "resourcesPerNode": {"requests": {"cpu": "100m"}},
            },
            "runtimePatches": [patch],
        },
    }  # fmt: skip


def complete(executor: LocalExecutor, namespace: str, name: str) -> bool:
    status = get_json(executor.cluster, "trainjob", name, "-n", namespace).get("status", {})
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    assert conditions.get("Failed") != "True", status
    return conditions.get("Complete") == "True"


def rank_pods(executor: LocalExecutor, namespace: str, name: str) -> list[dict[str, Any]]:
    pods = get_json(executor.cluster, "pods", "-n", namespace, "-l", f"{JOBSET_NAME}={name}")
    items: list[dict[str, Any]] = pods["items"]
    return sorted(items, key=lambda p: int(p["metadata"]["labels"][COMPLETION_INDEX]))


def test_two_trainjobs_find_rank_zero_by_its_pod_dns_name_and_all_reduce_over_gloo(
    executor: LocalExecutor, namespace: str, runtime: str
) -> None:
    jobs = ("tj-a", "tj-b")
    executor.apply(namespace, *(trainjob(executor, job, runtime) for job in jobs))

    def both_complete() -> bool:
        return all(complete(executor, namespace, job) for job in jobs)

    try:
        wait_for("both TrainJobs to complete", both_complete, JOB_SECONDS)
    except AssertionError as exc:
        stories = [executor.describe(namespace, p["metadata"]["name"])
                   for job in jobs for p in rank_pods(executor, namespace, job)]  # fmt: skip
        raise AssertionError("\n".join([str(exc), *stories])) from None
    ports = set()
    for job in jobs:
        ranks = rank_pods(executor, namespace, job)
        assert len(ranks) == 2
        zero, one = ranks
        # The Trainer's torch plugin names rank 0 by its JobSet hostname; the pods carry it.
        assert (zero["spec"]["hostname"], zero["spec"]["subdomain"]) == (f"{job}-node-0-0", job)
        env = {e["name"]: e.get("value") for e in zero["spec"]["containers"][0]["env"]}
        assert env["PET_MASTER_ADDR"] == f"{job}-node-0-0.{job}"
        assert env["PET_MASTER_PORT"] == "29500" and env["PET_NNODES"] == "2"
        for pod in ranks:
            terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            assert terminated["message"] == "3"  # 1 + 2: both ranks of this job took part
        log = executor.logs(namespace, one["metadata"]["name"])
        assert "rank 1 of 2: sum 3" in log
        # Rank 1 met rank 0 at rank 0's pod IP, on the host port the executor gave 29500.
        master = next(line.split() for line in log.splitlines() if line.startswith("master "))
        assert master[1] == zero["status"]["podIP"] != one["status"]["podIP"]
        ports.add(master[2])
    assert len(ports) == 2 and "29500" not in ports  # two masters on one machine, apart
