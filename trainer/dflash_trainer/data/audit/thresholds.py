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
from dflash_trainer.data.likelihood.rows import DEFAULT_ENGINE_TOLERANCE
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
        default=50,
        ge=1,
        description="Per-source checks only judge sources with at least this many samples. "
        "Rates are judged with a one-sided 99% Wilson bound: at 50 samples a source at 3x a "
        "5% limit fails 64% of the time, at 20 samples 35% (docs/audit-gates.md).",
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
    min_thinking_tokens: int = Field(
        default=4,
        ge=1,
        description="Reasoning with at least one but fewer than this many tokens (whitespace "
        "and the tags not counted) is near-empty; none at all is empty.",
    )
    max_near_empty_thinking_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most answers allowed whose reasoning is near-empty (1 to "
        "minThinkingTokens-1 tokens): a template or prompt that all but skips thinking.",
    )
    min_completion_tokens_p10: int = Field(
        default=24,
        ge=0,
        description="Floor of a source's 10th percentile of generated tokens (thinking + "
        "answer): generic short answers that are not identical.",
    )
    min_completion_tokens_p50: int = Field(
        default=64,
        ge=0,
        description="Floor of a source's median of generated tokens (thinking + answer).",
    )
    min_thinking_tokens_p10: int = Field(
        default=8,
        ge=0,
        description="Floor of a source's 10th percentile of reasoning tokens (thinking on).",
    )
    min_thinking_tokens_p50: int = Field(
        default=32,
        ge=0,
        description="Floor of a source's median of reasoning tokens (thinking on).",
    )
    max_duplicate_completion_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most completions allowed that repeat an earlier one of their source "
        "(thinking + answer, equal after folding case and whitespace; tokens gate: equal "
        "supervised ids).",
    )
    loop_ngram_share: float = Rate(
        default=0.5,
        ge=0,
        le=1,
        description="A completion is a repetition loop when more than this share of its token "
        "4-grams repeat an earlier 4-gram of the same completion (healthy text: a few percent).",
    )
    max_repetition_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most completions allowed that are repetition loops, even ending in a stop "
        "token.",
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
        description="Largest share of samples allowed to carry one identical completion (reasoning and "
        "answer: a common short answer after distinct reasoning is healthy).",
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
    max_silent_truncation_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most completions allowed that are not reported as cut but sit at the "
        "generation limit, or at a spike at the top of their source's lengths.",
    )
    max_wrong_language_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most answers allowed written in a script the prompt does not use (an "
        "English prompt answered in Chinese).",
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
    max_mask_error_rate: float = Rate(
        default=0.01,
        ge=0,
        le=1,
        description="Most samples allowed whose loss mask supervises anything but assistant "
        "answers: the prompt, a turn header, or everything (an all-ones mask).",
    )

    # --- the target-likelihood check (all gates that judge completions or tokens) --------
    max_off_distribution_rate: float = Rate(
        default=0.05,
        ge=0,
        le=1,
        description="Most scored rows allowed that the target would not have generated under "
        "the regeneration's sampling settings (off-distribution: tokens outside the sampler's "
        "support, or an NLL far above the sampler's own draws).",
    )
    samples_per_source: int = Field(
        default=64,
        ge=0,
        description="Rows of each source scored under the target when the completions were "
        "imported (regeneration disabled), and by dflash-audit --model by default; 0 disables "
        "that scoring. The canary scores every row it regenerated.",
    )
    top_k: int = Field(
        default=20,
        ge=1,
        le=1024,
        description="k of the reported top-k share when the sampling has no top-k (greedy: 1; "
        "else regeneration's top-k, 20).",
    )
    engine_tolerance: float = Field(
        default=DEFAULT_ENGINE_TOLERANCE,
        ge=0,
        le=20,
        description="Nats per logit: the largest difference the generating engine's logits may have from "
        "the scorer's (sup-norm; e.g. vLLM bf16 vs transformers). A token lies outside the "
        "sampler's support only when it is outside under every sampler within this tolerance "
        "(a moving top-p boundary, ties at the top-k edge); default: one bf16 spacing at "
        "logit magnitudes 32-64.",
    )
    nll_tolerance: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="Nats per token subtracted from a row's NLL excess before its z-score: "
        "a systematic bias between engines is not taken for a wrong distribution.",
    )
    row_outside_share: float = Rate(
        default=0.005,
        ge=0,
        le=1,
        description="A row is off-distribution when more than this share of its supervised "
        "tokens lie outside the sampler's support (a 200-token row: two or more tokens, since one is not more "
        "than 0.5%).",
    )
    row_z: float = Field(
        default=4.0,
        gt=0,
        le=100,
        description="... or when its NLL exceeds the sampler's expectation by more than this "
        "many standard deviations (healthy rows: z ~ N(0, 1)).",
    )
    monitor_every_steps: int = Field(
        default=10,
        ge=0,
        description="Training scores the supervised tokens of every Nth step's batch under "
        "the target and stops the run (AuditFailed) when a source's off-distribution rate "
        "crosses maxOffDistributionRate; 0 disables the monitor.",
    )


# Fields that tune how checks measure rather than bound one check: every other field is the
# threshold of exactly the check named after it (`maxStubRate` bounds `stub_rate`).
SETTINGS = frozenset(
    {
        "min_source_samples",
        "stub_tokens",
        "expect_thinking",
        "min_thinking_tokens",
        "loop_ngram_share",
        "samples_per_source",
        "top_k",
        "engine_tolerance",
        "nll_tolerance",
        "row_outside_share",
        "row_z",
        "monitor_every_steps",
    }
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
