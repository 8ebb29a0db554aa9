"""A team's GPU queue on the local Kueue, as the operator tests and the benchmarks set it up: a
ResourceFlavor for one GPU product, a ClusterQueue for one namespace only, and its LocalQueue.
"""

from __future__ import annotations

from typing import Any

API = "kueue.x-k8s.io/v1beta2"


def build_gpu_queue(
    namespace: str,
    cluster_queue: str,
    flavor: str,
    gpu_product: str,
    gpus: int,
    *,
    local_queue: str = "gpus",
    held: bool = False,
    preemption: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The three objects; `held` stops admission (stopPolicy Hold). Kueue admits only what the
    queue covers: every resource a stage pod requests (cpu, memory and ephemeral-storage too),
    with the GPUs the binding quota."""
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "stopPolicy": "Hold" if held else "None",
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu"],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": 1000},
                {"name": "memory", "nominalQuota": "64Ti"},
                {"name": "ephemeral-storage", "nominalQuota": "64Ti"},
                {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}],
        }],
    }  # fmt: skip
    if preemption:
        spec["preemption"] = preemption
    return [
        {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": flavor},
         "spec": {"nodeLabels": {"nvidia.com/gpu.product": gpu_product}}},
        {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
         "spec": spec},
        {"apiVersion": API, "kind": "LocalQueue",
         "metadata": {"name": local_queue, "namespace": namespace},
         "spec": {"clusterQueue": cluster_queue}},
    ]  # fmt: skip
