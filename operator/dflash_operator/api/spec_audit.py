"""`spec.audit`: the thresholds of the data-audit gates, grouped by gate (prompts, completions,
tokens) plus the few that every gate shares.

Mirrors `Thresholds` of `dflash_trainer/data/audit/thresholds.py` name for name (camelCase
here) with the same defaults and bounds; `thresholds_file()` flattens it back into that
file's shape for the stage pods. `tests/unit/api/test_audit_thresholds.py` keeps the two in
sync. Thresholds stay editable while a run exists; a retry uses the new values.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from dflash_operator.api.base import ApiModel, NodePoolName, nested, stage_deadline
from dflash_operator.api.spec_resources import Resources, resources_field

# Nats per logit: one bf16 spacing at logit magnitudes 32-64, where two bf16 engines that each
# round to nearest can differ (dflash_trainer.data.likelihood.rows.DEFAULT_ENGINE_TOLERANCE).
DEFAULT_ENGINE_TOLERANCE = 0.25


def _rate(default: float, description: str) -> Any:
    """A fraction in [0, 1]."""
    return Field(default=default, ge=0, le=1, description=description)


class PromptsGate(ApiModel):
    """Checks on the prompts as read from the sources, before any GPU is used."""

    max_malformed_rate: float = _rate(
        0.01,
        "Most unreadable rows allowed: invalid JSON or UTF-8, missing fields, non-string "
        "content, lines over 4 MiB.",
    )
    max_role_error_rate: float = _rate(
        0.01, "Most rows with unknown roles or turns out of order allowed."
    )
    max_empty_prompt_rate: float = _rate(0.01, "Most rows with no non-empty user message allowed.")
    max_duplicate_rate: float = _rate(
        0.3,
        "Most duplicate prompts allowed (they are dropped; a high rate means a repetitive or "
        "broken source).",
    )
    max_overlong_prompt_rate: float = _rate(
        0.01,
        "Most prompts allowed that leave the engine less than regeneration.maxNewTokens of "
        "context.",
    )


class CompletionsGate(ApiModel):
    """Checks on the answers the target regenerated, before tokenization."""

    max_empty_response_rate: float = _rate(
        0.02, "Most answers with no text after the think block allowed."
    )
    max_top_response_share: float = _rate(
        0.05,
        "Largest share of samples allowed to carry one identical completion (reasoning and "
        "answer: a common short answer after distinct reasoning is healthy).",
    )
    max_truncation_rate: float = _rate(
        0.05,
        "Most generations allowed to stop at regeneration.maxNewTokens (finish_reason length).",
    )
    max_stray_think_rate: float = _rate(
        0.01, "Most answers allowed with a <think> or </think> tag left in the answer text."
    )
    max_silent_truncation_rate: float = _rate(
        0.05,
        "Most completions allowed that are not reported as cut but sit at "
        "regeneration.maxNewTokens, or at a spike at the top of their source's lengths "
        "(imported completions without finish_reason).",
    )
    max_wrong_language_rate: float = _rate(
        0.05,
        "Most answers allowed written in a script the prompt does not use (an English prompt "
        "answered in Chinese).",
    )


class TokensGate(ApiModel):
    """Checks on the tokenized training data, before training."""

    max_loss_mask_mode_share: float = _rate(
        0.10,
        "Largest share of samples allowed to have the same loss_mask sum (87% at exactly 6 "
        "in the incident this project was born from).",
    )
    max_no_anchor_rate: float = _rate(
        0.05,
        "Most samples allowed without blockSize+1 consecutive supervised tokens (no valid "
        "DFlash anchor: they teach nothing).",
    )
    min_supervised_fraction: float = _rate(
        0.05, "Fewest supervised tokens allowed, as a fraction of all tokens."
    )
    max_seq_truncation_rate: float = _rate(
        0.05, "Most samples allowed to be cut at tokenization.maxSeqLen."
    )
    max_thinking_missing_rate: float = _rate(
        0.05,
        "Most samples allowed with no supervised </think> (checked when target.thinking is on).",
    )
    min_supervised_tokens: int = Field(
        default=1000, ge=0, description="Fewest supervised tokens in the whole dataset."
    )
    max_drift_rate: float = _rate(
        0.10,
        "Most samples allowed whose re-tokenized answer differs from the token ids the "
        "engine generated.",
    )
    max_mask_error_rate: float = _rate(
        0.01,
        "Most samples allowed whose loss mask supervises anything but assistant answers: the "
        "prompt, a turn header, or everything (an all-ones mask).",
    )


class LikelihoodGate(ApiModel):
    """The target-likelihood check: would the target itself have generated the supervised
    tokens, under regeneration's sampling settings and the training template? Scored by the
    canary on its own sample, by the score stage on a sample of imported completions, and
    during training on every monitorEverySteps-th batch (docs/audit-gates.md, section 8)."""

    max_off_distribution_rate: float = _rate(
        0.05,
        "Most scored rows allowed that the target would not have generated under the "
        "regeneration's sampling settings (off-distribution: tokens outside the sampler's "
        "support, or an NLL far above the sampler's own draws).",
    )
    samples_per_source: int = Field(
        default=64,
        ge=0,
        description=(
            "Rows of each source scored under the target when the completions were imported "
            "(regeneration disabled: the score stage), and by dflash-audit --model by "
            "default; 0 disables that scoring. The canary scores every row it regenerated."
        ),
    )
    top_k: int = Field(
        default=20,
        ge=1,
        le=1024,
        description=(
            "k of the reported top-k share when the sampling has no top-k (greedy: 1; "
            "else regeneration's top-k, 20)."
        ),
    )
    engine_tolerance: float = Field(
        default=DEFAULT_ENGINE_TOLERANCE,
        ge=0,
        le=20,
        description=(
            "Nats per logit: the largest difference the generating engine's logits may have "
            "from the scorer's (sup-norm; e.g. vLLM bf16 vs transformers). A token lies "
            "outside the sampler's support only when it is outside under every sampler within "
            "this tolerance (a moving top-p boundary, ties at the top-k edge); default: one "
            "bf16 spacing at logit magnitudes 32-64."
        ),
    )
    nll_tolerance: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description=(
            "Nats per token subtracted from a row's NLL excess before its z-score: a "
            "systematic bias between engines is not taken for a wrong distribution."
        ),
    )
    row_outside_share: float = _rate(
        0.005,
        "A row is off-distribution when more than this share of its supervised tokens lie "
        "outside the sampler's support (a 200-token row: two or more tokens, since one is not more "
        "than 0.5%).",
    )
    row_z: float = Field(
        default=4.0,
        gt=0,
        le=100,
        description=(
            "... or when its NLL exceeds the sampler's expectation by more than this many "
            "standard deviations (healthy rows: z ~ N(0, 1))."
        ),
    )
    monitor_every_steps: int = Field(
        default=10,
        ge=0,
        description=(
            "Training scores the supervised tokens of every Nth step's batch under the "
            "target and stops the run (AuditFailed) when a source's off-distribution rate "
            "crosses maxOffDistributionRate; 0 disables the monitor."
        ),
    )


_GATE_GROUPS = ("prompts", "completions", "tokens", "likelihood")
# Fields that tune how checks measure, not the bound of one check (the trainer's SETTINGS).
SETTING_FIELDS = frozenset(
    {
        "min_source_samples", "stub_tokens", "min_thinking_tokens", "loop_ngram_share",
        "samples_per_source", "top_k", "engine_tolerance", "nll_tolerance",
        "row_outside_share", "row_z", "monitor_every_steps",
    }
)  # fmt: skip
# Checks that share another check's threshold.
_ALSO_CHECKS = {"min_samples": " (per source, in the prompts gate: source_samples)"}


def check_of(field: str) -> str:
    """`max_stub_rate` -> `stub_rate`: the check name reported in status and reports."""
    return field.split("_", 1)[1]


def _name_checks(model: type[ApiModel]) -> None:
    """Append the check each threshold bounds to its description (kubectl explain, docs)."""
    for name, info in model.model_fields.items():
        if name.startswith(("max_", "min_")) and name not in SETTING_FIELDS:
            also = _ALSO_CHECKS.get(name, "")
            info.description = f"{info.description} Check: {check_of(name)}{also}."
    model.model_rebuild(force=True)


for _gate_model in (PromptsGate, CompletionsGate, TokensGate, LikelihoodGate):
    _name_checks(_gate_model)


def threshold_field_path(name: str) -> str | None:
    """`maxTruncationRate` (a thresholds.yaml key) -> `spec.audit.completions.maxTruncationRate`;
    None for a name spec.audit does not have."""
    for group in _GATE_GROUPS:
        model = AuditSpec.model_fields[group].annotation
        assert isinstance(model, type) and issubclass(model, ApiModel)
        if any(info.alias == name for info in model.model_fields.values()):
            return f"spec.audit.{group}.{name}"
    shared = {info.alias for key, info in AuditSpec.model_fields.items() if key not in _GATE_GROUPS}
    return f"spec.audit.{name}" if name in shared and name != "nodePool" else None


class AuditSpec(ApiModel):
    """Thresholds of the gates that stop a run before GPU time is spent on broken data.

    A gate fails when any check crosses its limit, overall or in any source with at least
    minSourceSamples samples. The first five fields apply to every gate they concern.
    """

    min_samples: int = Field(
        default=1, ge=0, description="Fewest samples a gate accepts; an empty dataset fails."
    )
    min_source_samples: int = Field(
        default=50,
        ge=1,
        description=(
            "Per-source checks only judge sources with at least this many samples. Rates are "
            "judged with a one-sided 99% Wilson bound: at 50 samples a source at 3x a 5% "
            "limit fails 64% of the time, at 20 samples 35%."
        ),
    )
    stub_tokens: int = Field(
        default=16,
        ge=1,
        description=(
            "An answer (completions gate) or a loss-mask sum (tokens gate) shorter than this "
            "many tokens is a stub. The incident's stub was 6 tokens."
        ),
    )
    max_stub_rate: float = _rate(0.05, "Most stubs allowed (completions and tokens gates).")
    max_empty_thinking_rate: float = _rate(
        0.05,
        "Most answers with an empty think block (<think>\\n\\n</think>) allowed (completions "
        "and tokens gates, when target.thinking is on).",
    )
    min_thinking_tokens: int = Field(
        default=4,
        ge=1,
        description=(
            "Reasoning with at least one but fewer than this many tokens (whitespace and the "
            "tags not counted) is near-empty; none at all is empty."
        ),
    )
    max_near_empty_thinking_rate: float = _rate(
        0.05,
        "Most answers allowed whose reasoning is near-empty (1 to minThinkingTokens-1 tokens), "
        "when target.thinking is on.",
    )
    min_completion_tokens_p10: int = Field(
        default=24,
        ge=0,
        description=(
            "Floor of a source's 10th percentile of generated tokens (thinking + answer): "
            "generic short answers that are not identical."
        ),
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
    max_duplicate_completion_rate: float = _rate(
        0.05,
        "Most completions allowed that repeat an earlier one of their source (completions: "
        "equal after folding case and whitespace; tokens: equal supervised ids).",
    )
    loop_ngram_share: float = _rate(
        0.5,
        "A completion is a repetition loop when more than this share of its token 4-grams "
        "repeat an earlier 4-gram of the same completion (healthy text: a few percent).",
    )
    max_repetition_rate: float = _rate(
        0.05, "Most completions allowed that are repetition loops, even ending in a stop token."
    )
    prompts: PromptsGate = nested(PromptsGate, "Prompts gate thresholds.")
    completions: CompletionsGate = nested(CompletionsGate, "Completions gate thresholds.")
    tokens: TokensGate = nested(TokensGate, "Tokens gate thresholds.")
    likelihood: LikelihoodGate = nested(
        LikelihoodGate,
        "The target-likelihood check (canary, imported completions, training monitor).",
    )
    active_deadline_seconds: int | None = stage_deadline("each audit gate")
    resources: Resources | None = resources_field("audit pod")
    node_pool: NodePoolName | None = Field(
        default=None,
        description="Node pool for audit Jobs. Unset: the operator's default (cpu).",
    )

    def thresholds_file(self, *, expect_thinking: bool) -> dict[str, Any]:
        """The flat `thresholds.yaml` the gates read (dflash_trainer.data.audit.thresholds):
        shared fields and every gate's fields side by side; `expectThinking` follows
        `spec.target.thinking`.
        """
        shared = self.model_dump(
            mode="json",
            by_alias=True,
            exclude={
                "prompts",
                "completions",
                "tokens",
                "likelihood",
                "node_pool",
                "active_deadline_seconds",
                "resources",
            },
        )
        return {
            **shared,
            **self.prompts.to_api(),
            **self.completions.to_api(),
            **self.tokens.to_api(),
            **self.likelihood.to_api(),
            "expectThinking": expect_thinking,
        }


_name_checks(AuditSpec)
