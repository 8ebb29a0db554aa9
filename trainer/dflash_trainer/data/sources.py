"""The sources list (`spec.data.sources[]`, rendered to `sources.yaml`): model and loader.

Reading the files a source points to lives in `data.readers`; normalizing rows in `data.formats`.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from dflash_trainer.data.errors import BadInputError, format_validation_error, is_user_fixable
from dflash_trainer.storage import StorageError, store_for


class SourceFormat(StrEnum):
    SHAREGPT = "sharegpt"
    OPENAI_MESSAGES = "openai-messages"
    ALPACA = "alpaca"
    PROMPT_ONLY = "prompt-only"
    REGENERATED = "regenerated"


class Turns(StrEnum):
    FIRST = "first"
    ALL = "all"


class SourceSampling(BaseModel):
    """How imported completions were generated (`spec.data.sources[].sampling`)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    temperature: float = Field(ge=0.0, le=2.0, description="0: greedy decoding.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="1.0: no top-p.")
    top_k: int = Field(default=0, ge=0, le=1024, description="0: no top-k.")
    min_p: float = Field(default=0.0, ge=0.0, le=1.0, description="0: no min-p.")


class SourceSpec(BaseModel):
    """One entry of `spec.data.sources`."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Source name; appears in sample ids, reports and per-source metrics.",
    )
    uri: str = Field(
        min_length=1,
        description="s3://bucket/key or a local path: one file (.jsonl, .jsonl.gz, .jsonl.zst, "
        ".parquet) or a folder/prefix of such files.",
    )
    format: SourceFormat = Field(description="How rows are laid out.")
    max_samples: int | None = Field(
        default=None, ge=1, description="Keep at most this many distinct prompts (the first ones)."
    )
    weight: float = Field(
        default=1.0,
        ge=0.0,
        le=100.0,
        description="Copies of each prompt: 2.0 regenerates every prompt twice, 0.5 keeps half "
        "(chosen by a stable hash of the sample id).",
    )
    turns: Turns = Field(
        default=Turns.FIRST,
        description="first: regenerate the first assistant turn; all: every turn, in order.",
    )
    sampling: SourceSampling | None = Field(
        default=None,
        description="Imported completions only: the sampling they were generated with; "
        "unset: unknown (the likelihood check judges none of the source's rows).",
    )

    @field_validator("uri")
    @classmethod
    def _no_whitespace(cls, value: str) -> str:
        if value != value.strip():
            raise ValueError("must not start or end with whitespace")
        return value


class SourcesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sources: list[SourceSpec] = Field(min_length=1)


def parse_sources(data: Any, where: str) -> list[SourceSpec]:
    """Validate a parsed YAML document: a list of sources, or `{sources: [...]}`."""
    if isinstance(data, list):
        data = {"sources": data}
    try:
        parsed = SourcesFile.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(format_validation_error(exc, where)) from None
    names = [s.name for s in parsed.sources]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BadInputError(f"{where}: source names must be unique; repeated: {', '.join(dupes)}")
    return parsed.sources


def load_sources(uri: str | Path) -> list[SourceSpec]:
    """Read and validate `sources.yaml` (local path or s3:// URI)."""
    where = str(uri)
    try:
        raw = store_for(where).read_bytes(where)
    except StorageError as exc:
        if not is_user_fixable(exc):
            raise
        raise BadInputError(f"sources file: {exc}") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise BadInputError(f"{where} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_sources(data, where)
