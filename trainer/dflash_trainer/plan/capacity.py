"""One GPU's memory for the plan, and the allocator setting of the pods: from `--gpu-memory`,
else the manifest's pool (its `gpuMemory`, or the GPU product of a pool the chart ships). When
none is known the plan says fit was not judged (`__main__.py` exits with its own code).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_memplan.allocator import alloc_conf_of, is_expandable
from dflash_memplan.gpus import CHART_TRAINING_POOL, chart_pool_gpu_memory, pool_gpu_memory
from dflash_memplan.units import parse_memory_size

from dflash_trainer.train.config import ConfigError, load_yaml_mapping


@dataclass(frozen=True)
class Capacity:
    """`bytes` None: not known, fit is not judged. `source` says where the figure came from."""

    bytes: int | None
    source: str
    # The pods' allocator setting (the pool's env or --alloc-conf): always set, fit judged
    # or not, since the estimate printed counts its fragmentation either way.
    expandable_segments: bool


def load_pools(path: Path) -> dict[str, Any]:
    """`nodePools` of a Helm values file (charts/dflash-operator/values.yaml), or a bare
    mapping of pool name -> pool."""
    data = load_yaml_mapping(path)
    pools = data.get("nodePools", data)
    if not isinstance(pools, dict) or not all(isinstance(p, dict) for p in pools.values()):
        raise ConfigError(f"--pools {path}: expected nodePools: {{<name>: <pool>}} (Helm values)")
    return {"nodePools": pools, "defaultPools": data.get("defaultPools") or {}}


def training_pool(run_pool: str | None, values: Mapping[str, Any] | None) -> str | None:
    """The pool a DFlashRun trains on: its own, else the values' default, else the chart's."""
    if run_pool:
        return run_pool
    defaults = (values or {}).get("defaultPools") or {}
    return str(defaults.get("training") or CHART_TRAINING_POOL)


def resolve_capacity(
    gpu_memory: str | None,
    pool_name: str | None,
    values: Mapping[str, Any] | None,
    alloc_conf: str | None,
) -> Capacity:
    """The GPU memory and allocator setting the plan judges fit against (ValueError: a bad
    size). An explicit `alloc_conf` wins over the pool's env; unset, the trainer pods'
    default (expandable segments, children/pod.py)."""
    pool = ((values or {}).get("nodePools") or {}).get(pool_name or "") or {}
    conf = alloc_conf if alloc_conf is not None else alloc_conf_of(pool.get("env") or {})
    expandable = conf is None or is_expandable(conf)
    if gpu_memory:
        return Capacity(parse_memory_size(gpu_memory), f"--gpu-memory {gpu_memory}", expandable)
    if pool_name and pool:
        size = pool_gpu_memory(pool)
        if size:
            return Capacity(parse_memory_size(size), f"pool {pool_name}: {size}", expandable)
        return Capacity(
            None, f"pool {pool_name} has no gpuMemory nor a known GPU product", expandable
        )
    if pool_name and values is None:
        size = chart_pool_gpu_memory(pool_name)
        if size:
            source = f"pool {pool_name}: {size}, the chart's default for it"
            return Capacity(parse_memory_size(size), source, expandable)
        return Capacity(
            None, f"pool {pool_name} is not a pool of the chart (pass --pools)", expandable
        )
    if pool_name:
        return Capacity(None, f"pool {pool_name} is not in --pools", expandable)
    return Capacity(None, "a train.yaml names no pool", expandable)
