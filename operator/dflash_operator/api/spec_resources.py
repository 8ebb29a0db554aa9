"""`resources` of a stage's pods: CPU, memory and ephemeral storage requests and limits
(GPUs and a pool's extra resources come from the placement, never from here). Unset keys
take the node pool's defaults, then the operator's (children/resources.py).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dflash_operator.api.base import ApiModel, Quantity, Rule

GPU_RESOURCE = "nvidia.com/gpu"
MAX_RESOURCES = 16

_NO_GPU_KEY = Rule(
    rule=f"!('{GPU_RESOURCE}' in self)",
    message=(
        f"{GPU_RESOURCE} comes from the stage's GPU settings (training.gpusPerNode, "
        "regeneration.tensorParallel) and the node pool; remove it here"
    ),
    check=lambda resources: GPU_RESOURCE not in resources,
)

ResourceMap = Annotated[
    dict[Annotated[str, Field(max_length=253)], Quantity],
    Field(max_length=MAX_RESOURCES),
    _NO_GPU_KEY,
]


class Resources(ApiModel):
    """CPU, memory, ephemeral storage and other resources of each pod of a stage."""

    requests: ResourceMap | None = Field(
        default=None,
        description="Resources each pod requests, e.g. {cpu: 32, memory: 512Gi, "
        "ephemeral-storage: 200Gi}.",
    )
    limits: ResourceMap | None = Field(
        default=None, description="Resource limits of each pod, e.g. {memory: 600Gi}."
    )


def resources_field(pod: str) -> Resources | None:
    """The `resources` field of a stage section."""
    description = (
        f"CPU, memory and ephemeral storage per {pod}, key by key over the node pool's "
        "defaults and the operator's (docs/operations.md, Resources). The /tmp volume's size "
        "limit is the ephemeral-storage limit (else request)."
    )
    return Field(default=None, description=description)
