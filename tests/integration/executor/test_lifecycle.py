"""Deletion and restarts behave like kubelet: SIGTERM then SIGKILL after the grace period, the
pod object removed afterwards; restartPolicy OnFailure restarts the process in place."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dflash_dev import procs
from dflash_dev.executor.testing import LocalExecutor, container_state
from dflash_dev.kube_wait import wait_for

GRACEFUL = """
import signal, sys, time
def stop(*_):
    print("got SIGTERM, saving", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(300)
"""
STUBBORN = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", os.getpid(), flush=True)
time.sleep(300)
"""
# Fails on its first two runs, succeeds on the third: the emptyDir remembers the attempts.
FLAKY = """
import pathlib, sys
tries = pathlib.Path("/scratch/tries")
count = int(tries.read_text()) + 1 if tries.exists() else 1
tries.write_text(str(count))
print("attempt", count, flush=True)
sys.exit(0 if count >= 3 else 4)
"""


def wait_log(executor: LocalExecutor, namespace: str, name: str, text: str) -> None:
    wait_for(f"{text!r} in the log of {name}", lambda: text in _log(executor, namespace, name))


def _log(executor: LocalExecutor, namespace: str, name: str) -> str:
    try:
        return executor.logs(namespace, name)
    except Exception:
        return ""


def test_deleting_a_running_pod_sends_sigterm_and_the_pod_disappears(
    executor: LocalExecutor, namespace: str
) -> None:
    executor.apply(namespace, executor.pod("graceful", ["python", "-c", GRACEFUL]))
    executor.wait_phase(namespace, "graceful", "Running")
    wait_log(executor, namespace, "graceful", "ready")
    start = time.monotonic()
    executor.cluster.kubectl("delete", "pod", "graceful", "-n", namespace, "--wait=false")
    executor.wait_gone(namespace, "graceful")
    assert time.monotonic() - start < 10  # it exits on SIGTERM: no 30 s grace wait
    assert "got SIGTERM, saving" in executor.logs(namespace, "graceful")
    assert not (executor.state_dir / "pods" / namespace / "graceful").exists()


def test_a_pod_ignoring_sigterm_is_killed_after_its_grace_period(
    executor: LocalExecutor, namespace: str
) -> None:
    pod = executor.pod("stubborn", ["python", "-c", STUBBORN], terminationGracePeriodSeconds=2)
    executor.apply(namespace, pod)
    executor.wait_phase(namespace, "stubborn", "Running")
    # "ready " with its space: the start marker line quotes the script, which says "ready",
    wait_log(executor, namespace, "stubborn", "ready ")
    pid = int(executor.logs(namespace, "stubborn").split("ready ")[1].split()[0])
    start = time.monotonic()
    executor.cluster.kubectl("delete", "pod", "stubborn", "-n", namespace, "--wait=false")
    executor.wait_gone(namespace, "stubborn")
    took = time.monotonic() - start
    assert 2 <= took < 15, f"deleted after {took:.1f}s, expected the 2 s grace period"
    assert procs.process_start_ticks(pid) is None  # SIGKILLed, not orphaned
    assert "SIGKILL after 2s" in executor.logs(namespace, "stubborn")


def test_on_failure_restarts_a_failing_process_in_place_until_it_succeeds(
    executor: LocalExecutor, namespace: str
) -> None:
    pod = executor.pod(
        "flaky",
        ["python", "-c", FLAKY],
        restartPolicy="OnFailure",
        volumes=[{"name": "scratch", "emptyDir": {}}],
        container={"volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]},
    )
    executor.apply(namespace, pod)
    done = executor.wait_phase(namespace, "flaky", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    status = done["status"]["containerStatuses"][0]
    assert status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 4
    log = executor.logs(namespace, "flaky")
    assert [line for line in log.splitlines() if line.startswith("attempt")] == [
        "attempt 1",
        "attempt 2",
        "attempt 3",
    ]
    assert log.count("restart 2:") == 1  # one start marker per run


def test_a_killed_process_is_restarted_by_on_failure_like_a_crashed_container(
    executor: LocalExecutor, namespace: str
) -> None:
    pod = executor.pod(
        "crashy",
        ["python", "-c", "import time; print('up', flush=True); time.sleep(300)"],
        restartPolicy="OnFailure",
    )
    executor.apply(namespace, pod)
    executor.wait_phase(namespace, "crashy", "Running")
    wait_log(executor, namespace, "crashy", "up")
    executor.kill(namespace, "crashy")

    def restarted(p: dict[str, Any]) -> bool:
        statuses = p.get("status", {}).get("containerStatuses") or [{}]
        return statuses[0].get("restartCount") == 1 and "running" in container_state(p)

    pod_now = executor.wait_until("the container to run again", namespace, "crashy", restarted)
    last = pod_now["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 137
    assert pod_now["status"]["phase"] == "Running"
    assert Path(executor.state_dir / "pods" / namespace / "crashy").exists()


def test_a_pod_deleted_while_it_waits_for_a_missing_secret_is_removed_at_once(
    executor: LocalExecutor, namespace: str
) -> None:
    env = [{"name": "K", "valueFrom": {"secretKeyRef": {"name": "nowhere", "key": "k"}}}]
    executor.apply(
        namespace, executor.pod("waiting", ["python", "-c", "pass"], container={"env": env})
    )
    executor.wait_until(
        "the pod to wait for its Secret",
        namespace,
        "waiting",
        lambda p: (
            "waiting" in container_state(p)
            and container_state(p)["waiting"]["reason"] == "CreateContainerConfigError"
        ),
    )
    executor.cluster.kubectl("delete", "pod", "waiting", "-n", namespace, "--wait=false")
    executor.wait_gone(namespace, "waiting", timeout=10)  # no grace period to wait out
