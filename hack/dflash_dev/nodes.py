"""The fake GPU node pools of the local cluster, as v1.Node manifests managed by kwok, and the
block and rack each GPU node sits in (the levels of Kueue's Topology, `topology.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
POOL_LABEL = "dflash.dev/node-pool"
# The topology levels of the fake GPU nodes, coarsest first (an NVLink block of racks), then the
# node itself: the labels Kueue's Topology names (topology.py).
BLOCK_LABEL = "dflash.dev/topology-block"
RACK_LABEL = "dflash.dev/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class FakePool:
    name: str
    count: int
    gpus: int
    product: str | None
    cpu: str = "96"
    memory: str = "1024Gi"
    labels: dict[str, str] = field(default_factory=dict)
    # Where the pool's nodes sit: the block, and how many consecutive nodes share a rack
    # (racks are named <block>-rack-<n>). None: no topology labels (a CPU pool).
    block: str | None = None
    nodes_per_rack: int = 1


# The node pools of ../shared/docs/DESIGN.md section 4, sized like the real machines. The B200
# pool is two racks of two nodes in one block, so that a 2-node gang has two racks to choose from
# (Kueue's topology-aware scheduling keeps it inside one); the RTX pool is one rack of its own.
DEFAULT_POOLS = (
    FakePool(
        "b200",
        count=4,
        gpus=8,
        product="NVIDIA-B200",
        cpu="224",
        memory="2048Gi",
        block="block-0",
        nodes_per_rack=2,
    ),
    FakePool(
        "rtx-pro-6000",
        count=2,
        gpus=4,
        product="NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        cpu="128",
        memory="1024Gi",
        block="block-1",
        nodes_per_rack=2,
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
    if pool.block is not None:
        labels[BLOCK_LABEL] = pool.block
        labels[RACK_LABEL] = rack_of(pool, index)
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


def rack_of(pool: FakePool, index: int) -> str:
    """The rack of a pool's index-th node (consecutive nodes share a rack)."""
    return f"{pool.block}-rack-{index // pool.nodes_per_rack}"


def build_nodes(pools: tuple[FakePool, ...] = DEFAULT_POOLS) -> list[dict[str, Any]]:
    return [build_node(pool, i) for pool in pools for i in range(pool.count)]
