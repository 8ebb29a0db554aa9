"""The operator with the real Kueue of the local control plane (its webhooks, its scheduler,
its PyTorchJob integration): two runs compete for one node's GPU quota; one trains, the other
waits with Kueue's reason and is never written while it waits; when the first finishes, the
second is admitted. spec.suspend of an admitted run goes through its Workload."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.kueue_queues import build_gpu_queue

from .conftest import imported_spec

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RTX_PRODUCT = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
# The figure: a suspended child is written 0 times over this long.
QUIET_SECONDS = 60


@pytest.fixture
def queue(harness: Any) -> Iterator[str]:
    """A ResourceFlavor for the RTX pool, a ClusterQueue with one node's GPUs (4) for this
    test's namespace only, and a LocalQueue; the training pool's pods name the queue."""
    suffix = harness.namespace[-6:]
    flavor, cluster_queue = f"rtx-{suffix}", f"dflash-{suffix}"
    objects = build_gpu_queue(
        harness.namespace, cluster_queue, flavor, RTX_PRODUCT, 4,
        preemption={"withinClusterQueue": "LowerPriority"},
    )  # fmt: skip
    harness.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    harness.pools["nodePools"]["rtx-pro-6000"]["labels"][QUEUE_LABEL] = "gpus"
    yield cluster_queue
    harness.cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
    harness.cluster.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


def to_training(harness: Any, make_spec: Any, name: str, **extra: Any) -> None:
    """A run with regenerated data (no regeneration), through its gates, to its training."""
    spec = imported_spec(
        make_spec,
        **extra,
        # 2 pods x 2 GPUs: one node's quota, admitted by Kueue as one gang (all pods or none)
        training={"nodes": 2, "gpusPerNode": 2, "maxRestarts": 1},
        evaluation={"enabled": False},
    )
    harness.apply_run(name, spec)
    harness.finish_score(name)
    for stage in ("audit-completions", "tokenize", "audit-tokens"):
        child = f"{name}-{stage}"
        wait_for(child, lambda child=child: child in harness.names("jobs"))
        harness.finish(child, harness.stage_results[stage])
    wait_for(f"{name}-train", lambda: f"{name}-train" in harness.names("pytorchjobs"))


def pytorchjob(harness: Any, name: str) -> dict[str, Any]:
    return dict(
        get_json(
            harness.cluster, "pytorchjob", name, "-n", harness.namespace, "--show-managed-fields"
        )
    )


def finish_training(harness: Any, job: str) -> None:
    """The master ends with the trainer's result; the PyTorchJob succeeds with it (and its
    cleanPodPolicy removes the worker)."""
    pods = harness.running_pods(job, 2)
    master = next(
        p for p in pods
        if p["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "master"
    )  # fmt: skip
    harness.finish_pod(master, harness.stage_results["train"])


def admitted(harness: Any, run: str) -> dict[str, Any] | None:
    return harness.condition(run, "Admitted")


def test_two_runs_compete_for_one_nodes_quota_and_the_waiting_one_is_never_written(
    harness: Any, make_spec: Any, queue: str
) -> None:
    harness.start_operator()
    to_training(harness, make_spec, "r1")
    harness.running_pods("r1-train", 2)  # admitted at once, both pods: the quota was free
    wait_for("r1 admitted", lambda: (admitted(harness, "r1") or {}).get("status") == "True")
    assert f"ClusterQueue {queue}" in admitted(harness, "r1")["message"]

    to_training(harness, make_spec, "r2")

    def queued() -> dict[str, Any] | None:
        """Queued, in Kueue's words (its first reconcile of the Workload may say less)."""
        condition = admitted(harness, "r2") or {}
        return condition if "nvidia.com/gpu" in condition.get("message", "") else None

    condition = wait_for("r2 to show that it waits", queued)
    assert "waits in Kueue LocalQueue gpus" in condition["message"]
    assert condition["reason"] == "Queued" and condition["status"] == "False"
    status = harness.status("r2")
    assert status["progress"] == "train queued"
    assert "waits in Kueue LocalQueue gpus" in status["message"]
    printed = harness.kubectl("get", "dfr", "r2").stdout
    assert "train queued" in printed

    # While it waits, nobody writes r2's PyTorchJob: its spec keeps generation 1 and
    # suspend true, and the operator's field manager entry keeps its creation time.
    before = pytorchjob(harness, "r2-train")
    time.sleep(QUIET_SECONDS)
    after = pytorchjob(harness, "r2-train")
    assert after["spec"]["runPolicy"]["suspend"] is True
    assert after["metadata"]["generation"] == before["metadata"]["generation"] == 1
    ours = [m for m in after["metadata"]["managedFields"] if "dflash" in m.get("manager", "")]
    assert ours == [
        m for m in before["metadata"]["managedFields"] if "dflash" in m.get("manager", "")
    ]
    assert not harness.pods_of("r2-train")

    # r1 finishes: Kueue releases its quota and admits r2 (all its pods at once).
    finish_training(harness, "r1-train")
    harness.wait_phase("r1", "Succeeded")
    harness.running_pods("r2-train", 2, timeout=90)  # the whole gang
    wait_for("r2 admitted", lambda: (admitted(harness, "r2") or {}).get("status") == "True")
    assert harness.status("r2")["progress"] != "train queued"


def test_suspending_an_admitted_run_deactivates_its_workload_and_resume_readmits_it(
    harness: Any, make_spec: Any, queue: str
) -> None:
    harness.start_operator()
    to_training(harness, make_spec, "r1")
    harness.running_pods("r1-train", 2)
    uid = pytorchjob(harness, "r1-train")["metadata"]["uid"]

    def workload() -> dict[str, Any]:
        items = get_json(
            harness.cluster, "workloads", "-n", harness.namespace,
            "-l", f"kueue.x-k8s.io/job-uid={uid}",
        )["items"]  # fmt: skip
        assert len(items) == 1, items
        return dict(items[0])

    harness.patch_spec("r1", {"suspend": True})
    harness.wait_phase("r1", "Suspended")
    wait_for("the Workload to be deactivated", lambda: workload()["spec"].get("active") is False)
    wait_for(
        "Kueue to stop the PyTorchJob",
        lambda: pytorchjob(harness, "r1-train")["spec"]["runPolicy"].get("suspend") is True,
    )
    wait_for("the training pods to go", lambda: not harness.pods_of("r1-train"))

    harness.patch_spec("r1", {"suspend": False})
    wait_for("the Workload to be active", lambda: workload()["spec"].get("active") is not False)
    harness.running_pods("r1-train", 2, timeout=90)
    harness.wait_phase("r1", "Training")
    assert pytorchjob(harness, "r1-train")["metadata"]["uid"] == uid  # the same job resumed
    assert json.dumps(admitted(harness, "r1")).count("Admitted") >= 1


PRIORITIES = {"dflash-test-low": 100, "dflash-test-high": 1000}


def test_a_higher_priority_run_preempts_and_the_preempted_training_resumes_the_same_job(
    harness: Any, make_spec: Any, queue: str
) -> None:
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": {"name": name}, "value": value, "preemptionPolicy": "Never"}
        for name, value in PRIORITIES.items()
    ]  # fmt: skip
    harness.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(classes))
    harness.start_operator()
    to_training(harness, make_spec, "low", priorityClassName="dflash-test-low")
    harness.running_pods("low-train", 2)
    uid = pytorchjob(harness, "low-train")["metadata"]["uid"]

    to_training(harness, make_spec, "high", priorityClassName="dflash-test-high")
    harness.running_pods("high-train", 2, timeout=90)  # Kueue evicted "low" to admit it

    def preempted() -> dict[str, Any] | None:
        condition = admitted(harness, "low") or {}
        return condition if condition.get("reason") == "Queued" else None

    condition = wait_for("low to show its preemption", preempted)
    assert "waits in Kueue LocalQueue gpus" in condition["message"]
    assert pytorchjob(harness, "low-train")["spec"]["runPolicy"]["suspend"] is True
    wait_for("low's pods to go", lambda: not harness.pods_of("low-train"))
    assert harness.status("low")["phase"] == "Training"  # waiting, not failed

    finish_training(harness, "high-train")
    harness.wait_phase("high", "Succeeded")
    harness.running_pods("low-train", 2, timeout=90)  # readmitted: the same job resumes
    assert pytorchjob(harness, "low-train")["metadata"]["uid"] == uid
    wait_for("low admitted again", lambda: (admitted(harness, "low") or {}).get("status") == "True")
