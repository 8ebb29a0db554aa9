"""The fake GPU node pools of the local cluster, as v1.Node manifests managed by kwok."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
POOL_LABEL = "dflash.dev/node-pool"


@dataclass(frozen=True)
class FakePool:
    name: str
    count: int
    gpus: int
    product: str | None
    cpu: str = "96"
    memory: str = "1024Gi"
    labels: dict[str, str] = field(default_factory=dict)


# The node pools of ../shared/docs/DESIGN.md section 4, sized like the real machines.
DEFAULT_POOLS = (
    FakePool("b200", count=2, gpus=8, product="NVIDIA-B200", cpu="224", memory="2048Gi"),
    FakePool(
        "rtx-pro-6000",
        count=2,
        gpus=4,
        product="NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        cpu="128",
        memory="1024Gi",
    ),
    FakePool("cpu", count=1, gpus=0, product=None, cpu="32", memory="128Gi"),
)


def build_node(pool: FakePool, index: int, annotation: str = KWOK_ANNOTATION) -> dict[str, Any]:
    name = f"{pool.name}-{index}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        POOL_LABEL: pool.name,
        **pool.labels,
    }
    capacity = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110", "ephemeral-storage": "1Ti"}
    taints: list[dict[str, str]] = []
    if pool.gpus:
        labels["nvidia.com/gpu.product"] = pool.product or ""
        labels["nvidia.com/gpu.count"] = str(pool.gpus)
        capacity[GPU_RESOURCE] = str(pool.gpus)
        taints.append(dict(GPU_TAINT))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {annotation: "fake"}},
        "spec": {"taints": taints},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def build_nodes(pools: tuple[FakePool, ...] = DEFAULT_POOLS) -> list[dict[str, Any]]:
    return [build_node(pool, i) for pool in pools for i in range(pool.count)]
