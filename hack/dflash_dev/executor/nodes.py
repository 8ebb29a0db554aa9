"""The executor's own Node objects: registration, Ready heartbeats, Leases, taints, shutdown.

Only nodes named `<prefix>-<i>` that carry the executor label are ever touched: kwok's nodes (and
anything else) are left alone, and a name clash is refused with a clear error.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from dflash_dev.errors import DevError
from dflash_dev.nodes import POOL_LABEL

from .config import (
    EXECUTOR_LABEL,
    EXECUTOR_VALUE,
    HOLDER_ANNOTATION,
    INSTANCE_LABEL,
    LOCAL_POOL,
    NOT_READY_TAINT,
    TAINT,
    ExecutorConfig,
)
from .kube import MERGE, Kube, Obj, is_status

log = logging.getLogger(__name__)

# kubelet's defaults: a Lease of 40 s renewed every 10 s; node status posted on a slower beat.
LEASE_DURATION_SECONDS = 40
LEASE_RENEW_SECONDS = 10.0
NODE_STATUS_SECONDS = 30.0
# No cgroups enforce anything here: capacity only steers the scheduler. Twice the machine means
# two pods that each ask for the whole machine fit on one node (a Master and a Worker, say).
CAPACITY_FACTOR = 2
MIN_CPUS = 2
MAX_PODS = 110  # kubelet's default --max-pods
LEASE_NAMESPACE = "kube-node-lease"
READY_REASON = "KubeletReady"
READY_MESSAGE = "the dflash process executor runs this node's pods as local processes"
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def node_capacity(cfg: ExecutorConfig) -> dict[str, str]:
    """What each node advertises: flags win, else this machine times CAPACITY_FACTOR."""
    cpus = max(os.cpu_count() or 1, MIN_CPUS) * CAPACITY_FACTOR
    capacity = {
        "cpu": cfg.cpu or str(cpus),
        "memory": cfg.memory or f"{_memory_bytes() * CAPACITY_FACTOR // 2**20}Mi",
        "pods": str(MAX_PODS),
        "ephemeral-storage": f"{shutil.disk_usage(_existing(cfg.state_dir)).total // 2**20}Mi",
    }
    if cfg.gpus:
        capacity["nvidia.com/gpu"] = str(cfg.gpus)
    return capacity


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def build_conditions(ready: bool, reason: str, message: str, previous: list[Obj]) -> list[Obj]:
    """Node conditions now; a condition keeps its lastTransitionTime while its status holds."""
    stamp = _now()
    before = {c.get("type"): c for c in previous}
    wanted = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", ""),
        ("DiskPressure", "False", "KubeletHasSufficientDisk", ""),
        ("PIDPressure", "False", "KubeletHasSufficientPID", ""),
        ("Ready", "True" if ready else "False", reason, message),
    ]
    conditions = []
    for kind, status, why, text in wanted:
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        conditions.append(
            {
                "type": kind,
                "status": status,
                "reason": why,
                "message": text or None,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": since or stamp,
            }
        )
    return conditions


def build_node(cfg: ExecutorConfig, name: str, kubernetes_version: str) -> Obj:
    """The Node manifest for executor node `name` (status included, as kubelet registers)."""
    capacity = node_capacity(cfg)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                EXECUTOR_LABEL: EXECUTOR_VALUE,
                INSTANCE_LABEL: cfg.instance,
                POOL_LABEL: LOCAL_POOL,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": ARCH.get(platform.machine(), platform.machine()),
            },
        },
        "spec": {"taints": [dict(TAINT)]},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "conditions": build_conditions(True, READY_REASON, READY_MESSAGE, []),
            "nodeInfo": {
                "kubeletVersion": kubernetes_version,
                "containerRuntimeVersion": "dflash-executor://local-processes",
                "operatingSystem": "linux",
                "architecture": ARCH.get(platform.machine(), platform.machine()),
                "kernelVersion": platform.release(),
                "osImage": "local processes (dflash process executor)",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kubeProxyVersion": "",
            },
        },
    }


def build_taints(current: list[Obj], ready: bool) -> list[Obj]:
    """Keep others' taints; ours always; the not-ready NoSchedule taint only when not ready.

    The apiserver adds `node.kubernetes.io/not-ready` to new nodes and the node lifecycle
    controller that would lift it is off in this cluster, so the executor manages it itself.
    """

    def same(a: Obj, b: Obj) -> bool:
        return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")

    kept = [t for t in current if not same(t, TAINT) and not same(t, NOT_READY_TAINT)]
    wanted = [dict(TAINT)] + ([] if ready else [dict(NOT_READY_TAINT)])
    return kept + wanted


def is_executor_node(node: Obj, instance: str) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    return labels.get(EXECUTOR_LABEL) == EXECUTOR_VALUE and labels.get(INSTANCE_LABEL) == instance


class NodeKeeper:
    """Registers the executor's nodes and keeps them Ready until `shutdown()`."""

    def __init__(self, kube: Kube, cfg: ExecutorConfig, executor_id: str) -> None:
        self.kube = kube
        self.cfg = cfg
        self.executor_id = executor_id
        try:
            self.version = str(kube.get("/version").get("gitVersion", "v0.0.0"))
        except Exception as exc:
            raise DevError(
                f"cannot reach the API server at {kube.server} ({type(exc).__name__}: {exc}); "
                f"is the cluster of {cfg.kubeconfig} up? (`make cluster-up`)"
            ) from None
        self.registered: list[str] = []  # only these are ever updated or marked NotReady

    def register(self) -> None:
        """Create or adopt every node, claim its Lease, report Ready, lift the not-ready taint."""
        for name in self.cfg.node_names:
            self._claim_lease(name)
            self._ensure_node(name)
            self._renew_lease(name)
            self._post_status(name, ready=True)
            self._set_taints(name, ready=True)
            self.registered.append(name)
        log.info("nodes ready: %s", ", ".join(self.registered))

    def keep_alive(self, stop: threading.Event) -> None:
        """Renew Leases every 10 s and post Ready every 30 s until `stop` is set."""
        since_status = 0.0
        while not stop.wait(LEASE_RENEW_SECONDS):
            since_status += LEASE_RENEW_SECONDS
            for name in self.registered:
                try:
                    self._renew_lease(name)
                    if since_status >= NODE_STATUS_SECONDS:
                        self._post_status(name, ready=True)
                except Exception as exc:  # keep beating: one failed call is not fatal
                    if is_status(exc, 404):
                        log.warning("node %s disappeared; registering it again", name)
                        self._safely(self._reregister, name)
                    else:
                        log.warning("heartbeat of node %s failed: %s", name, exc)
            if since_status >= NODE_STATUS_SECONDS:
                since_status = 0.0

    def shutdown(self) -> None:
        """Mark every node NotReady and unschedulable, or delete it (`--delete-nodes-on-exit`)."""
        for name in self.registered:
            if self.cfg.delete_nodes_on_exit:
                self._safely(self.kube.delete, f"/api/v1/nodes/{name}")
            else:
                self._safely(self._post_status, name, False)
                self._safely(self._set_taints, name, False)
            self._safely(self.kube.delete, self._lease_path(name))

    # ------------------------------------------------------------------ internals
    def _safely(self, call: Callable[..., object], *args: object) -> None:
        """Best effort: shutdown and re-registration go on past one failed call."""
        try:
            call(*args)
        except Exception as exc:
            if not is_status(exc, 404):
                log.warning("node bookkeeping failed: %s", exc)

    def _reregister(self, name: str) -> None:
        self._ensure_node(name)
        self._post_status(name, ready=True)
        self._set_taints(name, ready=True)
        self._renew_lease(name)

    def _ensure_node(self, name: str) -> None:
        try:
            node = self.kube.get(f"/api/v1/nodes/{name}")
        except Exception as exc:
            if not is_status(exc, 404):
                raise
            self.kube.create("/api/v1/nodes", build_node(self.cfg, name, self.version))
            return
        if not is_executor_node(node, self.cfg.instance):
            labels = node.get("metadata", {}).get("labels") or {}
            raise DevError(
                f"node {name} already exists and is not a node of this executor (its labels: "
                f"{labels}); choose another --node-prefix"
            )
        # Adopted after a restart: refresh capacity and labels in case the flags changed.
        fresh = build_node(self.cfg, name, self.version)
        self.kube.patch(
            f"/api/v1/nodes/{name}", {"metadata": {"labels": fresh["metadata"]["labels"]}}
        )

    def _post_status(self, name: str, ready: bool) -> None:
        previous = self.kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions") or []
        fresh = build_node(self.cfg, name, self.version)["status"]
        if ready:
            fresh["conditions"] = build_conditions(True, READY_REASON, READY_MESSAGE, previous)
        else:
            fresh["conditions"] = build_conditions(
                False, "ExecutorStopped", "the process executor serving this node stopped", previous
            )
        self.kube.patch(f"/api/v1/nodes/{name}/status", {"status": fresh})

    def _set_taints(self, name: str, ready: bool) -> None:
        node = self.kube.get(f"/api/v1/nodes/{name}")
        current = node.get("spec", {}).get("taints") or []
        wanted = build_taints(current, ready)
        if wanted != current:
            self.kube.patch(
                f"/api/v1/nodes/{name}",
                {
                    "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                    "spec": {"taints": wanted},
                },
                content_type=MERGE,
            )

    def _lease_path(self, name: str) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"

    def _claim_lease(self, name: str) -> None:
        """Refuse a node whose Lease another live executor renewed within its duration."""
        try:
            lease = self.kube.get(self._lease_path(name))
        except Exception as exc:
            if not is_status(exc, 404):
                raise
            return
        holder = (lease["metadata"].get("annotations") or {}).get(HOLDER_ANNOTATION)
        renewed = lease.get("spec", {}).get("renewTime")
        if holder and holder != self.executor_id and renewed:
            age = (
                datetime.now(UTC) - datetime.fromisoformat(renewed.replace("Z", "+00:00"))
            ).total_seconds()
            if age < LEASE_DURATION_SECONDS:
                raise DevError(
                    f"node {name} is served by another executor ({holder}, Lease renewed "
                    f"{age:.0f}s ago); stop it (`make executor-down`) or pick another --node-prefix"
                )

    def _renew_lease(self, name: str) -> None:
        body: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": LEASE_NAMESPACE,
                "annotations": {HOLDER_ANNOTATION: self.executor_id},
            },
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                "renewTime": _micro_now(),
            },
        }
        try:
            self.kube.patch(self._lease_path(name), body, content_type=MERGE)
        except Exception as exc:
            if not is_status(exc, 404):
                raise
            node = self.kube.get(f"/api/v1/nodes/{name}")
            body["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
            ]
            self.kube.create(
                f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", body
            )
