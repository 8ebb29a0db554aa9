"""GPU memory of the pools the Helm chart ships, by GPU product: where a manifest names one of
them and no `gpuMemory` is given, the plan still judges fit (`python -m dflash_trainer.plan`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRODUCT_LABEL = "nvidia.com/gpu.product"
# One GPU's memory as the driver reports it, per product: the chart's own pool values
# (charts/dflash-operator/values.yaml; a test keeps the two equal).
GPU_PRODUCT_MEMORY = {
    "NVIDIA-B200": "179Gi",
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": "95Gi",
}
# The chart's default GPU pools and their product.
CHART_POOL_PRODUCTS = {
    "b200": "NVIDIA-B200",
    "rtx-pro-6000": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
}
# The pool the chart trains on when a DFlashRun names none (values.yaml defaultPools.training).
CHART_TRAINING_POOL = "rtx-pro-6000"


def pool_gpu_memory(pool: Mapping[str, Any]) -> str | None:
    """A pool definition's `gpuMemory`, else the memory of its GPU product when known."""
    if pool.get("gpuMemory"):
        return str(pool["gpuMemory"])
    product = (pool.get("nodeSelector") or {}).get(PRODUCT_LABEL)
    return GPU_PRODUCT_MEMORY.get(str(product)) if product else None


def chart_pool_gpu_memory(name: str) -> str | None:
    """The memory of a chart default pool, by name (None: not one of them)."""
    product = CHART_POOL_PRODUCTS.get(name)
    return GPU_PRODUCT_MEMORY.get(product) if product else None
