"""Audit thresholds: every limit of every gate, with its default and why (docs/audit-gates.md).

Mirrored by the DFlashRun CRD as `spec.audit` (same names, camelCase in YAML). Keep names stable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from dflash_trainer.data.errors import BadInputError, format_validation_error, is_user_fixable
from dflash_trainer.storage import StorageError, store_for

Rate = Field  # readability: every rate below is a fraction in [0, 1]


class Thresholds(BaseModel):
    """Per-run audit thresholds (`spec.audit`). A gate fails when any check crosses its limit,
    overall or in any source with at least `minSourceSamples` samples."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    # --- all gates -------------------------------------------------------------------------
    min_samples: int = Field(
        default=1, ge=0, description="Fewest samples a gate accepts; an empty dataset fails."
    )
    min_source_samples: int = Field(
        default=20,
        ge=1,
        description="Per-source checks only judge sources with at least this many samples "
        "(a rate over 3 samples is noise).",
    )
    expect_thinking: bool = Field(
        default=True,
        description="Answers were generated with thinking on: judge empty and missing thinking.",
    )
    stub_tokens: int = Field(
        default=16,
        ge=1,
        description="An answer (completions) or a loss-mask sum (tokens) shorter than this many "
        "tokens is a stub. The incident's stub was 6 tokens.",
    )
    max_stub_rate: float = Rate(default=0.05, ge=0, le=1, description="Most stubs allowed.")
    max_empty_thinking_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most answers with an empty think block (`<think>\\n\\n</think>`) allowed.",
    )

    # --- prompts gate ----------------------------------------------------------------------
    max_malformed_rate: float = Rate(
        default=0.01,
        ge=0,
        le=1,
        description="Most unreadable rows allowed: invalid JSON or UTF-8, missing fields, "
        "non-string content, lines over 4 MiB.",
    )
    max_role_error_rate: float = Rate(
        default=0.01,
        ge=0,
        le=1,
        description="Most rows with unknown roles or turns out of order allowed.",
    )
    max_empty_prompt_rate: float = Rate(
        default=0.01, ge=0, le=1, description="Most rows with no non-empty user message allowed."
    )
    max_duplicate_rate: float = Rate(
        default=0.3,
        ge=0,
        le=1,
        description="Most duplicate prompts allowed (they are dropped; a high rate means a "
        "repetitive or broken source).",
    )
    max_overlong_prompt_rate: float = Rate(
        default=0.01,
        ge=0,
        le=1,
        description="Most prompts allowed that leave the engine less than maxTokens of context.",
    )

    # --- completions gate ------------------------------------------------------------------
    max_empty_response_rate: float = Rate(
        default=0.02, ge=0, le=1, description="Most answers with no text after the think block."
    )
    max_top_response_share: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Largest share of samples allowed to carry one identical answer text.",
    )
    max_truncation_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most generations allowed to stop at maxTokens (finish_reason = length).",
    )
    max_stray_think_rate: float = Rate(
        default=0.01,
        ge=0,
        le=1,
        description="Most answers allowed with a `<think>`/`</think>` tag left in the answer text.",
    )

    # --- tokens gate -----------------------------------------------------------------------
    max_loss_mask_mode_share: float = Rate(
        default=0.10,
        ge=0,
        le=1,
        description="Largest share of samples allowed to have the same loss_mask sum (87% at "
        "exactly 6 in the incident).",
    )
    max_no_anchor_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most samples allowed without blockSize+1 consecutive supervised tokens "
        "(no valid DFlash anchor: they teach nothing).",
    )
    min_supervised_fraction: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Fewest supervised tokens allowed, as a fraction of all tokens.",
    )
    max_seq_truncation_rate: float = Rate(
        default=0.05, ge=0, le=1, description="Most samples allowed to be cut at maxSeqLen."
    )
    max_thinking_missing_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most samples allowed with no supervised `</think>` when thinking is expected.",
    )
    min_thinking_tokens: int = Field(
        default=3,
        ge=1,
        description="Thinking with fewer tokens than this between the tags counts as empty "
        "(tokens gate; `<think>\\n\\n</think>` has 1).",
    )
    min_supervised_tokens: int = Field(
        default=1000, ge=0, description="Fewest supervised tokens in the whole dataset."
    )
    max_drift_rate: float = Rate(
        default=0.10,
        ge=0,
        le=1,
        description="Most samples allowed whose re-tokenized answer differs from the token ids "
        "the engine generated.",
    )


# Fields that tune how checks measure rather than bound one check: every other field is the
# threshold of exactly the check named after it (`maxStubRate` bounds `stub_rate`).
SETTINGS = frozenset(
    {"min_source_samples", "stub_tokens", "expect_thinking", "min_thinking_tokens"}
)


def parse_thresholds(data: Any, where: str) -> Thresholds:
    if data is None:
        return Thresholds()
    if isinstance(data, dict) and set(data) == {"audit"}:
        data = data["audit"]
    try:
        return Thresholds.model_validate(data)
    except ValidationError as exc:
        raise BadInputError(format_validation_error(exc, where)) from None


def load_thresholds(uri: str | Path | None) -> Thresholds:
    """Defaults, overridden by a YAML/JSON file (camelCase keys, or `{audit: {...}}`)."""
    if uri is None:
        return Thresholds()
    where = str(uri)
    try:
        raw = store_for(where).read_bytes(where)
    except StorageError as exc:
        if not is_user_fixable(exc):
            raise
        raise BadInputError(f"thresholds file: {exc}") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise BadInputError(f"{where} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_thresholds(data, where)
