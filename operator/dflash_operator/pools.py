"""Node pools: the operator's named placement profiles (selectors, tolerations, GPUs per node,
extra resources, /dev/shm, env, labels), loaded from the YAML file the chart mounts.

Which pool each stage of a run uses, and whether the run fits it, is decided in
`plan/placement.py`; turning a pool into pod fields is `children/pod.py`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from dflash_memplan.units import parse_memory_size
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from dflash_operator.api.base import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, QUANTITY_PATTERN
from dflash_operator.api.spec_resources import GPU_RESOURCE

# Resource names and label keys: a DNS-subdomain prefix, '/', and a name.
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# The largest GPU count of one machine we have heard of is 16; 64 leaves room.
MAX_GPUS_PER_NODE = 64

Quantity = int | str


class PoolModel(BaseModel):
    """camelCase in YAML, unknown keys are mistakes."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class Toleration(PoolModel):
    """A `v1.Toleration`."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None

    def to_api(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


# `resources` keys of a pool: every stage, or one section's stages (cleanup: the S3 Jobs).
RESOURCE_KEYS = (
    "default",
    "regeneration",
    "audit",
    "tokenization",
    "training",
    "evaluation",
    "cleanup",
    "model",
)


class PoolResources(PoolModel):
    """CPU, memory and ephemeral storage of the pool's stage pods (a layer over the
    operator's defaults; a run's `<section>.resources` goes over it)."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_quantities(self) -> PoolResources:
        for part, values in (("requests", self.requests), ("limits", self.limits)):
            for name, value in values.items():
                if not re.fullmatch(QUANTITY_PATTERN, str(value)):
                    raise ValueError(
                        f"{part}.{name}={value!r} is not a Kubernetes quantity "
                        "(e.g. 8, 500m, 64Gi, 1.5Ti)"
                    )
        return self


class PoolThroughput(PoolModel):
    """Measured per-GPU throughput of the pool, for the GPU-hours a stopped run saved."""

    regeneration_tokens_per_gpu_second: float | None = Field(default=None, gt=0)
    training_tokens_per_gpu_second: float | None = Field(default=None, gt=0)


# Kueue's Topology Aware Scheduling: the gang's pods land inside one domain of this level.
TOPOLOGY_ANNOTATIONS = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
}


class PoolTopology(PoolModel):
    """Keep the training gang inside one topology domain (a rack, an NVLink block): Kueue's
    Topology Aware Scheduling, through the podset annotation on the gang's pod template."""

    # The node label of the level (e.g. cloud.provider.com/topology-rack), one of the levels of
    # the Topology the pool's ResourceFlavor names.
    level_label: str = Field(pattern=QUALIFIED_NAME_PATTERN, max_length=317)
    # required: the gang waits until one domain has room; preferred: Kueue may spread it.
    mode: Literal["required", "preferred"] = "required"

    @property
    def annotation(self) -> dict[str, str]:
        return {TOPOLOGY_ANNOTATIONS[self.mode]: self.level_label}


class NodePool(PoolModel):
    """Where and how a stage's pods run."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    # A raw `v1.Affinity`, copied into pods as is.
    affinity: dict[str, Any] | None = None
    gpus_per_node: int = Field(default=0, ge=0, le=MAX_GPUS_PER_NODE)
    gpu_resource: str = Field(default=GPU_RESOURCE, pattern=QUALIFIED_NAME_PATTERN)
    # Memory of one GPU (a quantity, e.g. 95Gi): a run whose training would not fit it fails
    # at admission (plan/memory_check.py); unset: not checked.
    gpu_memory: str | None = Field(default=None, pattern=QUANTITY_PATTERN)
    # Requested (and limited) by every GPU pod of the pool, e.g. {rdma/ib: 1}.
    extra_resources: dict[str, Quantity] = Field(default_factory=dict)
    # Memory-backed /dev/shm size limit for NCCL; None: bounded only by the pod's memory.
    shm_size: str | None = Field(default=None, pattern=QUANTITY_PATTERN)
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    scheduler_name: str | None = None
    # Linux capabilities GPU pods need on this pool, e.g. IPC_LOCK for RDMA.
    add_capabilities: tuple[str, ...] = ()
    # Requests and limits of stage pods: `default` (all stages), or a section's name.
    resources: dict[str, PoolResources] = Field(default_factory=dict)
    # Per-GPU throughput (the estimate of what a gate saved); unset: the operator's defaults.
    throughput: PoolThroughput = Field(default_factory=PoolThroughput)
    # Secrets (in each run's namespace) to pull stage images with, by name.
    image_pull_secrets: tuple[str, ...] = ()
    # ServiceAccount (in each run's namespace) of the pool's stage pods but training's, for a
    # cloud identity (IRSA, Workload Identity); a run's spec.serviceAccountName wins.
    service_account_name: str | None = Field(default=None, pattern=DNS_SUBDOMAIN_PATTERN)
    # Topology Aware Scheduling of the training gang (Kueue); unset: no constraint.
    topology: PoolTopology | None = None

    @model_validator(mode="after")
    def _check_names(self) -> NodePool:
        if self.gpu_memory is not None:
            if not self.has_gpus:
                raise ValueError("gpuMemory is set on a pool without GPUs (gpusPerNode 0)")
            try:
                parse_memory_size(self.gpu_memory)
            except ValueError as error:
                raise ValueError(f"gpuMemory: {error}") from None
        for resource in self.extra_resources:
            if not re.fullmatch(QUALIFIED_NAME_PATTERN, resource):
                raise ValueError(f"extraResources key {resource!r} is not a resource name")
            if resource == self.gpu_resource:
                raise ValueError(
                    f"extraResources may not contain {resource!r}: GPUs come from gpusPerNode"
                )
        for key, entry in self.resources.items():
            if key not in RESOURCE_KEYS:
                raise ValueError(
                    f"resources key {key!r} is not accepted: use one of {', '.join(RESOURCE_KEYS)}"
                )
            for resource in (*entry.requests, *entry.limits):
                if resource == self.gpu_resource or resource in self.extra_resources:
                    raise ValueError(
                        f"resources.{key} may not set {resource!r}: it comes from gpusPerNode "
                        "and extraResources"
                    )
        for name in self.env:
            if not re.fullmatch(ENV_NAME_PATTERN, name):
                raise ValueError(f"env name {name!r} is not a valid environment variable name")
        for key in (*self.labels, *self.annotations, *self.node_selector):
            if not re.fullmatch(QUALIFIED_NAME_PATTERN, key):
                raise ValueError(f"{key!r} is not a valid label or annotation key")
        return self

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0

    @property
    def gpu_memory_bytes(self) -> int | None:
        return parse_memory_size(self.gpu_memory) if self.gpu_memory else None


class StageDefaults(PoolModel):
    """The pool of each stage when the run does not name one."""

    regeneration: str
    audit: str
    tokenization: str
    training: str
    # Unset: the training pool (evaluation serves the same target).
    evaluation: str | None = None
    # Unset: the audit pool (cleanup only talks to S3).
    cleanup: str | None = None
    # The model stage (copies a Hub target into the run root). Unset: the tokenization pool.
    model: str | None = None


class PoolsConfig(PoolModel):
    """The whole pools file: `nodePools` and `defaults`."""

    node_pools: dict[str, NodePool] = Field(min_length=1)
    defaults: StageDefaults

    @model_validator(mode="after")
    def _check_references(self) -> PoolsConfig:
        for name in self.node_pools:
            if not re.fullmatch(DNS_LABEL_PATTERN, name):
                raise ValueError(
                    f"nodePools key {name!r} is not a pool name (lowercase letters, digits, '-')"
                )
        for stage, pool in self.defaults.model_dump(exclude_none=True).items():
            if pool not in self.node_pools:
                raise ValueError(
                    f"defaults.{stage}={pool!r} is not a configured pool; configured pools: "
                    f"{', '.join(sorted(self.node_pools))}"
                )
        return self

    def names(self) -> str:
        return ", ".join(sorted(self.node_pools))


class PoolsError(ValueError):
    """The pools file is missing or wrong: names the file, the key and the value."""


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors(include_url=False):
        path = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] in {"value_error", "assertion_error"}:
            lines.append(f"{path}: {message}")
        else:
            lines.append(f"{path}={item.get('input')!r} is not accepted: {message}")
    return "; ".join(lines)


def parse_pools(raw: Any, source: str = "pools") -> PoolsConfig:
    """Validate a parsed pools document; PoolsError names `source` and each mistake."""
    try:
        return PoolsConfig.model_validate(raw)
    except ValidationError as error:
        raise PoolsError(f"{source}: {_describe(error)}") from None


def load_pools(path: Path) -> PoolsConfig:
    """Read and validate the pools file at `path`."""
    try:
        text = path.read_text()
    except OSError as error:
        raise PoolsError(
            f"cannot read the node pools file {path}: {error.strerror}; set --pools-file or "
            "DFLASH_POOLS_FILE to the YAML file with nodePools and defaults"
        ) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise PoolsError(f"{path} is not valid YAML: {error}") from None
    return parse_pools(raw, str(path))
