"""The whole `DFlashRun` object as the operator reads it: metadata, spec and status.

`validation.py` turns a raw dict into one, with messages a user can act on.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dflash_operator.api.constants import API_VERSION, KIND
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.status import DFlashRunStatus


class RunMetadata(BaseModel):
    """The parts of `metadata` the operator uses; everything else is ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    name: str
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class DFlashRun(BaseModel):
    """A DFlashRun custom resource."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: RunMetadata
    spec: DFlashRunSpec
    status: DFlashRunStatus = Field(default_factory=DFlashRunStatus)

    def to_api(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
