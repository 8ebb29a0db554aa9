"""Helpers for tests that run pods on a process executor: a handle with pod builders, waits
that print the pod's status and logs on timeout, and the crash hook. Used by the executor's
own tests and meant for e2e tests (start one with `start_test_executor`)."""

from __future__ import annotations

import os
import random
import secrets
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dflash_dev import procs
from dflash_dev.executor_service import NAME, launch
from dflash_dev.kube_wait import Kubectl, get_json, wait_for

from .config import INSTANCE_LABEL, TAINT
from .logs import executor_logs
from .process import kill_pod

Obj = dict[str, Any]
# Short crash-loop back-off so restart tests take seconds, not kubelet's 10 s doubling.
TEST_BACKOFF_INITIAL = 0.5
TEST_BACKOFF_MAX = 2.0
TERMINAL = ("Succeeded", "Failed")


def container_state(pod: Obj) -> Obj:
    """The first container's current state, without the empty keys (`{"running": {...}}`)."""
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return {k: v for k, v in (statuses[0].get("state") or {}).items() if v}


@dataclass
class LocalExecutor:
    """A running executor (its nodes are `<instance>-0..N-1`) and ways to use it."""

    cluster: Kubectl
    kubeconfig: Path
    state_dir: Path
    instance: str
    tracked: procs.Tracked
    args: tuple[str, ...]  # what it was launched with, to restart it the same way
    node_count: int = 2

    @property
    def nodes(self) -> list[str]:
        return [f"{self.instance}-{i}" for i in range(self.node_count)]

    def placement(self) -> Obj:
        """nodeSelector + toleration that put a pod on this executor's nodes only."""
        return {
            "nodeSelector": {INSTANCE_LABEL: self.instance},
            "tolerations": [{"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
        }

    def pod(self, name: str, command: list[str], **spec: Any) -> Obj:
        """A Pod on this executor: first container `main` runs `command`; `container=` adds
        container fields, `metadata=` metadata fields, other keywords go to the pod spec."""
        container = {"name": "main", "image": "python:3.11", "command": command}
        container.update(spec.pop("container", {}))
        metadata = {"name": name, **spec.pop("metadata", {})}
        pod_spec = {"restartPolicy": "Never", **self.placement(), "containers": [container]}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {**pod_spec, **spec},
        }

    def template(self, command: list[str], **spec: Any) -> Obj:
        """A pod template (for a Job or a PyTorchJob replica) on this executor, as `pod()`."""
        pod = self.pod("unused", command, **spec)
        del pod["metadata"]["name"]
        return {"metadata": pod["metadata"], "spec": pod["spec"]}

    def apply(self, namespace: str, *objects: Obj) -> None:
        self.cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(objects))

    def get_pod(self, namespace: str, name: str) -> Obj:
        pod: Obj = get_json(self.cluster, "pod", name, "-n", namespace)
        return pod

    def wait_until(
        self, what: str, namespace: str, name: str, check: Callable[[Obj], Any], timeout: float = 60
    ) -> Obj:
        """Poll the pod until `check(pod)` is truthy; on timeout, fail with its story."""

        def reached() -> Obj | None:
            pod = self.get_pod(namespace, name)
            return pod if check(pod) else None

        try:
            found = wait_for(what, reached, timeout)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe(namespace, name)}") from None
        return found or {}  # wait_for returns only a truthy value: never {}

    def wait_phase(self, namespace: str, name: str, *phases: str, timeout: float = 60) -> Obj:
        return self.wait_until(
            f"pod {namespace}/{name} to reach {' or '.join(phases)}",
            namespace,
            name,
            lambda pod: pod.get("status", {}).get("phase") in phases,
            timeout,
        )

    def wait_gone(self, namespace: str, name: str, timeout: float = 30) -> None:
        def gone() -> bool:
            result = self.cluster.kubectl("get", "pod", name, "-n", namespace, check=False)
            return bool(result.returncode != 0)

        wait_for(f"pod {namespace}/{name} to disappear", gone, timeout)

    def logs(self, namespace: str, name: str) -> str:
        return executor_logs(namespace, name, state_dir=self.state_dir)

    def kill(self, namespace: str, name: str) -> int:
        """SIGKILL the pod's process group: a crashed container, as far as Kubernetes sees."""
        return kill_pod(namespace, name, state_dir=self.state_dir)

    def describe(self, namespace: str, name: str) -> str:
        """The pod's status, its log and the executor's log: what a failed wait should show."""
        status = self.cluster.kubectl(
            "get", "pod", name, "-n", namespace, "-o", "jsonpath={.status}", check=False
        ).stdout
        try:
            log = self.logs(namespace, name)[-3000:]
        except Exception as exc:
            log = str(exc)
        executor = procs.tail(self.tracked.log, 30)
        return f"--- status: {status}\n--- pod log:\n{log}\n--- executor log:\n{executor}"

    def stop(self) -> None:
        """SIGTERM: a clean shutdown (children stopped, nodes NotReady or deleted)."""
        procs.stop(self.state_dir, NAME)

    def crash(self) -> None:
        """SIGKILL the executor alone, as an OOM kill would: no cleanup of any kind."""
        os.kill(self.tracked.pid, signal.SIGKILL)
        wait_for("the executor to die", lambda: not self.tracked.is_alive(), 10)

    def start_again(self) -> None:
        self.tracked = launch(self.kubeconfig, self.state_dir, *self.args)


def start_test_executor(
    cluster: Kubectl, kubeconfig: Path, state_dir: Path, *extra: str, nodes: int = 2
) -> LocalExecutor:
    """An executor on fresh nodes `t<hex>-*` with its own loopback range, short back-off, and
    `--exit-with-pid` so that a killed test session leaves no executor behind."""
    instance = f"t{secrets.token_hex(3)}"
    cidr = f"127.{random.randint(100, 199)}.{random.randint(0, 255)}.0/24"  # noqa: S311
    args = (
        f"--nodes={nodes}",
        f"--node-prefix={instance}",
        f"--pod-cidr={cidr}",
        f"--backoff-initial={TEST_BACKOFF_INITIAL}",
        f"--backoff-max={TEST_BACKOFF_MAX}",
        f"--exit-with-pid={os.getpid()}",
        *extra,
    )
    tracked = launch(kubeconfig, state_dir, *args)
    return LocalExecutor(cluster, kubeconfig, state_dir, instance, tracked, args, nodes)
