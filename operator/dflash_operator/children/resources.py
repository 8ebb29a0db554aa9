"""Requests and limits of every stage pod. GPUs and the pool's extra resources come from the
placement (requests = limits). CPU, memory and ephemeral storage are layered key by key:
the operator's defaults for the stage, then the pool's `resources.default`, then the pool's
entry for the stage's section, then the spec's `<section>.resources`. Every pod so has
requests and limits: a namespace with a LimitRange or a ResourceQuota on them admits it.

A layer that raises a request above a limit set below it raises that limit too (and a limit
set above lowers the request), so a merge never yields a pod the API server refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from dflash_operator.api.constants import Stage
from dflash_operator.api.spec import STAGE_SECTIONS, DFlashRunSpec
from dflash_operator.plan.placement import Placement

EPHEMERAL_STORAGE = "ephemeral-storage"
# The pool keys of the Jobs without a spec section: the S3 cleanup and prune Jobs, and the model
# stage.
CLEANUP_KEY = "cleanup"
MODEL_KEY = "model"
MODEL_STAGES = frozenset({Stage.CANARY, Stage.REGEN, Stage.SCORE, Stage.TRAIN, Stage.EVAL})
Layer = tuple[Mapping[str, Any], Mapping[str, Any]]  # (requests, limits)


@dataclass(frozen=True)
class Default:
    """(request, limit) of cpu (cores), memory and ephemeral storage (GiB)."""

    cpu: tuple[float, float]
    memory_gib: tuple[int, int]
    storage_gib: int

    def layer(self, scale: int = 1) -> Layer:
        requests = {
            "cpu": _cores(self.cpu[0] * scale),
            "memory": f"{self.memory_gib[0] * scale}Gi",
            EPHEMERAL_STORAGE: f"{self.storage_gib}Gi",
        }
        limits = {
            "cpu": _cores(self.cpu[1] * scale),
            "memory": f"{self.memory_gib[1] * scale}Gi",
            EPHEMERAL_STORAGE: f"{self.storage_gib}Gi",
        }
        return requests, limits


def _cores(value: float) -> str:
    return str(int(value)) if value >= 1 else f"{int(value * 1000)}m"


# A GPU pod of a model stage, per GPU: host memory to load and stage the weights (B200 nodes
# have ~256 GiB per GPU, RTX PRO 6000 nodes ~128 GiB); /tmp holds the target (a 27B model in
# bf16 is 54 GB) and compile caches.
PER_GPU = Default(cpu=(8, 16), memory_gib=(96, 96), storage_gib=100)
# The same stages on a CPU pool: tiny models (tests, the demo).
MODEL_ON_CPU = Default(cpu=(2, 8), memory_gib=(8, 16), storage_gib=20)
TOKENIZE = Default(cpu=(4, 8), memory_gib=(16, 32), storage_gib=50)
AUDIT = Default(cpu=(2, 4), memory_gib=(8, 16), storage_gib=20)
CLEANUP = Default(cpu=(0.1, 1), memory_gib=(1, 1), storage_gib=1)
# The model stage holds one file at a time in /tmp (a 27B target's shards are ~4 GB, the
# biggest single-file checkpoints ~30 GB) and hashes it while it uploads.
MODEL_FETCH = Default(cpu=(2, 4), memory_gib=(4, 8), storage_gib=64)


def default_layer(stage: Stage, gpus: int) -> Layer:
    if stage in MODEL_STAGES:
        return PER_GPU.layer(gpus) if gpus else MODEL_ON_CPU.layer()
    if stage == Stage.TOKENIZE:
        return TOKENIZE.layer()
    if stage in (Stage.CLEANUP, Stage.PRUNE):
        return CLEANUP.layer()
    if stage == Stage.MODEL:
        return MODEL_FETCH.layer()
    return AUDIT.layer()


def _merge(layers: list[Layer]) -> tuple[dict[str, str], dict[str, str]]:
    requests: dict[str, tuple[int, str]] = {}  # key -> (layer index, value)
    limits: dict[str, tuple[int, str]] = {}
    for index, (layer_requests, layer_limits) in enumerate(layers):
        for key, value in layer_requests.items():
            requests[key] = (index, str(value))
        for key, value in layer_limits.items():
            limits[key] = (index, str(value))
    for key in requests.keys() & limits.keys():
        (req_at, request), (lim_at, limit) = requests[key], limits[key]
        if _amount(request) > _amount(limit):
            if req_at >= lim_at:
                limits[key] = (req_at, request)  # the later layer asked for more
            else:
                requests[key] = (lim_at, limit)  # the later layer capped it
    return {k: v for k, (_, v) in requests.items()}, {k: v for k, (_, v) in limits.items()}


def _amount(value: str) -> Decimal:
    return Decimal(parse_quantity(value))


def stage_layers(spec: DFlashRunSpec, stage: Stage, placement: Placement) -> list[Layer]:
    """The layers of `stage`'s pods, lowest priority first."""
    layers = [default_layer(stage, placement.gpus)]
    pool_key = STAGE_SECTIONS.get(stage, MODEL_KEY if stage == Stage.MODEL else CLEANUP_KEY)
    for key in ("default", pool_key):
        entry = placement.pool.resources.get(key)
        if entry is not None:
            layers.append((entry.requests, entry.limits))
    section = spec.section_of(stage)
    resources = getattr(section, "resources", None)
    if resources is not None:
        layers.append((resources.requests or {}, resources.limits or {}))
    return layers


def build_resources(spec: DFlashRunSpec, stage: Stage, placement: Placement) -> dict[str, Any]:
    """`resources` of the stage's container."""
    requests, limits = _merge(stage_layers(spec, stage, placement))
    if placement.gpus:
        pool = placement.pool
        accelerators = {pool.gpu_resource: placement.gpus, **pool.extra_resources}
        for key, value in accelerators.items():
            requests[key] = limits[key] = str(value)
    return {"requests": requests, "limits": limits}


def tmp_size_limit(resources: Mapping[str, Any]) -> str | None:
    """The /tmp emptyDir's sizeLimit: the ephemeral-storage limit, else its request."""
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get(EPHEMERAL_STORAGE)
        if value is not None:
            return str(value)
    return None
