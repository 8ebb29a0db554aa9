"""`spec.audit`: the thresholds of the data-audit gates (prompts, completions, tokens).

Mirrors the trainer's `dflash_trainer/data/audit/thresholds.py` field for field (camelCase
here), with the same defaults; `tests/unit/api/test_audit_thresholds_match_trainer.py`
keeps the two in sync. Thresholds stay editable while a run exists.
"""

from __future__ import annotations

from pydantic import Field

from dflash_operator.api.base import ApiModel, NodePoolName, nested

Rate = float


def _rate(default: float, description: str) -> float:
    return Field(default=default, ge=0, le=1, description=description)


class PromptsGate(ApiModel):
    """Checks on the prompts, before any GPU is used."""

    min_samples: int = Field(
        default=1, ge=1, description="Fewest prompts (all sources together) a run may have."
    )
    max_empty_prompt_rate: Rate = _rate(
        0.01, "Largest share of prompts that are empty or whitespace."
    )
    max_duplicate_rate: Rate = _rate(
        0.2, "Largest share of prompts that repeat an earlier prompt of the same source."
    )


class CompletionsGate(ApiModel):
    """Checks on the regenerated answers, before tokenization."""

    max_empty_response_rate: Rate = _rate(
        0.02, "Largest share of answers with no text after the thinking block."
    )
    max_empty_thinking_rate: Rate = _rate(
        0.1, "Largest share of empty thinking blocks (checked when target.thinking is on)."
    )
    stub_max_tokens: int = Field(
        default=16,
        ge=0,
        le=4096,
        description="An answer with fewer output tokens than this is a stub.",
    )
    max_stub_rate: Rate = _rate(0.1, "Largest share of stub answers (see stubMaxTokens).")
    max_top_response_share: Rate = _rate(
        0.05, "Largest share of the single most frequent answer text."
    )
    max_truncation_rate: Rate = _rate(
        0.1, "Largest share of answers cut at maxNewTokens (finish_reason length)."
    )
    max_stray_think_tag_rate: Rate = _rate(
        0.01, "Largest share of answers with a <think> or </think> tag in the final text."
    )


class TokensGate(ApiModel):
    """Checks on the tokenized data, before training."""

    max_loss_mask_mode_share: Rate = _rate(
        0.2,
        "Largest share of samples whose loss_mask sum equals the most common sum (the "
        "incident: 87% of samples had exactly 6 supervised tokens).",
    )
    max_no_anchor_rate: Rate = _rate(
        0.05,
        "Largest share of samples without a valid anchor (fewer than blockSize+1 "
        "consecutive supervised tokens).",
    )
    min_supervised_fraction: Rate = _rate(
        0.1, "Smallest share of all tokens that are supervised (loss_mask 1)."
    )
    max_truncation_rate: Rate = _rate(
        0.1, "Largest share of samples cut at tokenization.maxSeqLen."
    )
    min_thinking_rate: Rate = _rate(
        0.9, "Smallest share of samples with a non-empty thinking block (when thinking is on)."
    )
    min_supervised_tokens: int = Field(
        default=1, ge=0, description="Fewest supervised tokens in the whole dataset."
    )


class AuditSpec(ApiModel):
    """Thresholds of the gates that stop a run before GPU time is spent on broken data."""

    prompts: PromptsGate = nested(PromptsGate, "Prompts gate thresholds.")
    completions: CompletionsGate = nested(CompletionsGate, "Completions gate thresholds.")
    tokens: TokensGate = nested(TokensGate, "Tokens gate thresholds.")
    node_pool: NodePoolName | None = Field(
        default=None,
        description="Node pool for audit Jobs. Unset: the operator's default (cpu).",
    )
