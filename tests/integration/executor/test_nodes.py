"""The executor serves its own Ready, tainted, leased nodes; only pods that tolerate the taint
land there, and kwok's nodes are never touched."""

from __future__ import annotations

from typing import Any

from dflash_dev.executor.config import EXECUTOR_LABEL, INSTANCE_LABEL, TAINT
from dflash_dev.executor.testing import LocalExecutor
from dflash_dev.kube_wait import get_json


def node(executor: LocalExecutor, name: str) -> dict[str, Any]:
    found: dict[str, Any] = get_json(executor.cluster, "node", name)
    return found


def test_executor_nodes_are_ready_tainted_labelled_and_leased(executor: LocalExecutor) -> None:
    for name in executor.nodes:
        found = node(executor, name)
        labels = found["metadata"]["labels"]
        assert labels[EXECUTOR_LABEL] == "local"
        assert labels[INSTANCE_LABEL] == executor.instance
        assert labels["dflash.dev/node-pool"] == "local"
        assert labels["kubernetes.io/hostname"] == name
        ready = next(c for c in found["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        taints = {(t["key"], t["effect"]) for t in found["spec"].get("taints") or []}
        assert taints == {(TAINT["key"], "NoSchedule")}  # not-ready lifted, ours kept
        assert int(found["status"]["allocatable"]["pods"]) > 0
        lease = get_json(executor.cluster, "lease", name, "-n", "kube-node-lease")
        assert lease["spec"]["holderIdentity"] == name


def test_kwok_nodes_keep_their_own_labels_and_taints(executor: LocalExecutor) -> None:
    for found in get_json(executor.cluster, "nodes", "-l", "type=kwok")["items"]:
        assert EXECUTOR_LABEL not in found["metadata"]["labels"]
        keys = {t["key"] for t in found["spec"].get("taints") or []}
        assert TAINT["key"] not in keys


def test_a_pod_without_the_toleration_is_never_scheduled_on_executor_nodes(
    executor: LocalExecutor, namespace: str
) -> None:
    pod = executor.pod("intolerant", ["python", "-c", "pass"])
    del pod["spec"]["tolerations"]
    executor.apply(namespace, pod)
    stuck = executor.wait_until(
        "the scheduler to give up on the pod",
        namespace,
        "intolerant",
        lambda p: any(
            c.get("reason") == "Unschedulable" for c in p.get("status", {}).get("conditions") or []
        ),
    )
    assert not stuck["spec"].get("nodeName")
    message = next(
        c["message"] for c in stuck["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    # Our two nodes match the selector; their taint is what keeps the pod off.
    assert "untolerated taint" in message
