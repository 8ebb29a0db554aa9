"""What the executor and its pod workers share: the API client, settings, the address pools,
and `finalize_pod` (remove a pod whose containers are gone)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from dflash_dev.images.engine import Engine

from .addresses import HostPorts, LoopbackPool, ServiceResolver
from .config import ExecutorConfig
from .kube import Kube, Obj, is_status, pod_path
from .objects import ObjectSource
from .sandbox import remove_sandbox, sandbox_root

log = logging.getLogger(__name__)


@dataclass
class Context:
    """Shared by every pod worker (each part is thread-safe)."""

    kube: Kube
    cfg: ExecutorConfig
    objects: ObjectSource
    ips: LoopbackPool
    ports: HostPorts
    resolver: ServiceResolver
    node_names: frozenset[str]
    allocatable: dict[str, str]
    engine: Engine | None = None  # image mode only

    @property
    def pods_dir(self) -> Path:
        return self.cfg.state_dir / "pods"


def finalize_pod(ctx: Context, pod: Obj) -> None:
    """Delete a pod object whose containers are gone (grace 0, as kubelet does) and its sandbox."""
    meta = pod["metadata"]
    try:
        ctx.kube.delete(
            pod_path(meta["namespace"], meta["name"]),
            {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta["uid"]},
            },
        )
    except Exception as exc:
        if not is_status(exc, 404, 409):  # gone already, or a newer pod of the same name
            log.warning("pod %s/%s: final delete failed: %s", meta["namespace"], meta["name"], exc)
    remove_sandbox(sandbox_root(ctx.pods_dir, meta["namespace"], meta["name"], meta["uid"]))
    if ctx.engine is not None:
        from .image_mode import release_rootfs

        release_rootfs(ctx.engine, ctx.cfg.instance, meta["uid"])
