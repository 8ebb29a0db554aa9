"""Kueue's topology-aware scheduling on the local cluster: one `Topology` (block, rack, node) and
a topology-aware `ResourceFlavor` per GPU pool. The nodes' labels come from `nodes.py`; queues
that use the flavors are the tests' or the user's own (examples/kueue/).
"""

from __future__ import annotations

from typing import Any

from .nodes import BLOCK_LABEL, DEFAULT_POOLS, GPU_RESOURCE, HOSTNAME_LABEL, RACK_LABEL

TOPOLOGY_NAME = "dflash-gpu"
# Coarsest first. The last level is the node's hostname, so that Kueue assigns each pod its node
# (the ungater sets the pod's nodeSelector to it) instead of leaving the last step to the
# scheduler.
LEVELS = (BLOCK_LABEL, RACK_LABEL, HOSTNAME_LABEL)
FLAVOR_SUFFIX = "-topology"
KUEUE_API = "kueue.x-k8s.io/v1beta2"


def flavor_name(pool: str) -> str:
    """The topology-aware ResourceFlavor of a GPU pool (e.g. `b200-topology`)."""
    return f"{pool}{FLAVOR_SUFFIX}"


def build_topology() -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "Topology",
        "metadata": {"name": TOPOLOGY_NAME},
        "spec": {"levels": [{"nodeLabel": label} for label in LEVELS]},
    }


def build_flavors() -> list[dict[str, Any]]:
    """One flavor per GPU pool with a block: its nodes by GPU product, the GPU taint tolerated
    (Kueue's TAS leaves out nodes whose taints neither the pod nor the flavor tolerates)."""
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor_name(pool.name)},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": pool.product},
                "topologyName": TOPOLOGY_NAME,
                "tolerations": [
                    {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
                ],
            },
        }
        for pool in DEFAULT_POOLS
        if pool.block is not None and pool.product
    ]


def build_objects() -> list[dict[str, Any]]:
    return [build_topology(), *build_flavors()]
