"""Restarting the executor is like rebooting a node: lost processes are never orphaned, and
their pods restart or fail per restartPolicy; a stopped executor's nodes go NotReady."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dflash_dev import procs
from dflash_dev.errors import DevError
from dflash_dev.executor.testing import LocalExecutor, container_state, start_test_executor
from dflash_dev.executor_service import launch
from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.pytest_plugin import ClusterHandle

SLEEP = "import os, time; print('pid', os.getpid(), flush=True); time.sleep(300)"


@pytest.fixture
def own_executor(cluster: ClusterHandle, tmp_path: Path) -> Iterator[LocalExecutor]:
    """An executor this test may crash and restart; its nodes are deleted afterwards."""
    started = start_test_executor(cluster, cluster.kubeconfig, tmp_path / "state")
    yield started
    started.stop()
    cluster.kubectl("delete", "node", *started.nodes, "--ignore-not-found", check=False)


def pid_in_log(executor: LocalExecutor, namespace: str, name: str) -> int:
    wait_for(f"{name} to log its pid", lambda: "pid " in executor.logs(namespace, name))
    return int(executor.logs(namespace, name).split("pid ")[1].split()[0])


def test_after_an_executor_crash_lost_pods_restart_or_fail_per_their_policy(
    own_executor: LocalExecutor, namespace: str
) -> None:
    ex = own_executor
    ex.apply(
        namespace,
        ex.pod("never", ["python", "-c", SLEEP]),
        ex.pod("onfailure", ["python", "-c", SLEEP], restartPolicy="OnFailure"),
    )
    for name in ("never", "onfailure"):
        ex.wait_phase(namespace, name, "Running")
    pids = [pid_in_log(ex, namespace, name) for name in ("never", "onfailure")]
    ip_before = ex.get_pod(namespace, "onfailure")["status"]["podIP"]
    ex.crash()
    ex.start_again()
    wait_for(
        "no process of the crashed executor's pods to be left (no orphans)",
        lambda: all(procs.process_start_ticks(pid) is None for pid in pids),
        10,
    )
    failed = ex.wait_phase(namespace, "never", "Failed")
    assert failed["status"]["reason"] == "ExecutorRestarted"
    assert container_state(failed)["terminated"]["reason"] == "ExecutorRestarted"

    def running_again(pod: dict[str, Any]) -> bool:
        status = pod["status"]["containerStatuses"][0]
        return status["restartCount"] == 1 and "running" in container_state(pod)

    again = ex.wait_until("the OnFailure pod to run again", namespace, "onfailure", running_again)
    last = again["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["reason"] == "ExecutorRestarted"
    assert last["exitCode"] == 137
    assert again["status"]["podIP"] == ip_before  # a pod's IP never changes


def test_a_stopped_executor_leaves_its_nodes_not_ready_and_unschedulable(
    own_executor: LocalExecutor,
) -> None:
    own_executor.stop()  # SIGTERM: a clean shutdown
    for name in own_executor.nodes:
        node = get_json(own_executor.cluster, "node", name)
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False"
        assert ready["reason"] == "ExecutorStopped"
        taints = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
        assert ("node.kubernetes.io/not-ready", "NoSchedule") in taints


def test_a_second_executor_for_the_same_nodes_is_refused_with_a_clear_error(
    own_executor: LocalExecutor, tmp_path: Path
) -> None:
    prefix = own_executor.instance
    with pytest.raises(DevError, match="is served by another executor"):
        launch(own_executor.kubeconfig, tmp_path / "second", f"--node-prefix={prefix}")


def test_when_every_pod_ip_is_taken_a_new_pod_waits_until_one_is_freed(
    cluster: ClusterHandle, tmp_path: Path, namespace: str
) -> None:
    octets = f"{random.randint(100, 199)}.{random.randint(0, 255)}"
    small = start_test_executor(
        cluster, cluster.kubeconfig, tmp_path / "small", f"--pod-cidr=127.{octets}.0/30"
    )  # a /30 holds two pod IPs
    try:
        first, second, third = (small.pod(n, ["python", "-c", SLEEP]) for n in ("a", "b", "c"))
        small.apply(namespace, first, second)
        for name in ("a", "b"):
            small.wait_phase(namespace, name, "Running")
        small.apply(namespace, third)
        waiting = small.wait_until(
            "the third pod to wait for an IP",
            namespace,
            "c",
            lambda p: "no free pod IP" in str(container_state(p).get("waiting", {}).get("message")),
        )
        assert waiting["status"]["phase"] == "Pending"
        cluster.kubectl("delete", "pod", "a", "-n", namespace, "--wait=false")
        running = small.wait_phase(namespace, "c", "Running")
        assert running["status"]["podIP"].startswith(f"127.{octets}.")
    finally:
        small.stop()
        cluster.kubectl("delete", "node", *small.nodes, "--ignore-not-found", check=False)
