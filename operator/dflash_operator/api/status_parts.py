"""Parts of `status`: conditions, stage progress, audit results, the latest checkpoint and
children. `training` and `checkpoint` are exactly data-contracts section 6 (the trainer
patches them); the rest is written by the operator from stage results (section 5).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, PlainSerializer, StringConstraints

from dflash_operator.api.base import ApiModel
from dflash_operator.api.constants import (
    CONDITION_MESSAGE_MAX_LENGTH,
    CONDITION_REASON_MAX_LENGTH,
    CONDITION_REASON_PATTERN,
    CONDITION_TYPE_MAX_LENGTH,
    ConditionStatus,
    Gate,
    Verdict,
)

SHA256_PATTERN = "^[0-9a-f]{64}$"


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamps must carry a time zone, e.g. 2026-05-01T12:00:00Z")
    return value


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# metav1.Time: RFC 3339 in UTC, to the second.
Timestamp = Annotated[
    datetime,
    AfterValidator(_aware),
    PlainSerializer(_rfc3339, return_type=str, when_used="json"),
]


class StatusModel(ApiModel):
    """Status parts ignore unknown keys: a newer operator may have written more."""

    model_config = ConfigDict(extra="ignore")


class Condition(StatusModel):
    """A `metav1.Condition`: the latest observation of one aspect of the run."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=CONDITION_TYPE_MAX_LENGTH)] = (
        Field(description="Condition type, e.g. Trained or DataAuditPassed.")
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed for."
    )
    last_transition_time: Timestamp = Field(
        description="When the status last changed (not when it was last checked)."
    )
    reason: Annotated[
        str,
        StringConstraints(
            min_length=1, max_length=CONDITION_REASON_MAX_LENGTH, pattern=CONDITION_REASON_PATTERN
        ),
    ] = Field(description="CamelCase reason, one of the documented constants.")
    message: Annotated[str, StringConstraints(max_length=CONDITION_MESSAGE_MAX_LENGTH)] = Field(
        description="Human-readable details, with numbers."
    )


class SourceLikelihood(StatusModel):
    """What the training monitor measured on one source's scored rows."""

    scored_rows: int | None = Field(default=None, ge=0, description="Rows scored so far.")
    off_rows: int | None = Field(
        default=None, ge=0, description="Of those, rows the target would not have generated."
    )
    off_distribution_rate: float | None = Field(
        default=None, ge=0, le=1, description="offRows / scoredRows."
    )
    mean_nll: float | None = Field(
        default=None, ge=0, description="Mean NLL per supervised token under the target (nats)."
    )


class TrainingLikelihood(StatusModel):
    """The training likelihood monitor's figures, patched by the trainer (data-contracts 6)."""

    step: int | None = Field(default=None, ge=0, description="The last step scored.")
    every_steps: int | None = Field(default=None, ge=0, description="Steps between scored ones.")
    scored_rows: int | None = Field(default=None, ge=0, description="Rows scored, all sources.")
    off_rows: int | None = Field(default=None, ge=0, description="Off-distribution rows.")
    max_off_distribution_rate: float | None = Field(
        default=None, ge=0, le=1, description="The limit each source is judged against."
    )
    verdict: Verdict | None = Field(
        default=None, description="fail once a source crossed its limit beyond noise."
    )
    sources: dict[str, SourceLikelihood] | None = Field(
        default=None, description="Per source (data.sources[].name)."
    )


class TrainingProgress(StatusModel):
    """Training progress, patched by the trainer's rank 0 (data-contracts section 6)."""

    step: int | None = Field(default=None, ge=0, description="Optimizer steps done.")
    total_steps: int | None = Field(default=None, ge=0, description="Optimizer steps planned.")
    epoch: float | None = Field(default=None, ge=0, description="Current epoch (fractional).")
    loss: float | None = Field(default=None, description="Recent training loss (decayed CE).")
    accuracy: float | None = Field(
        default=None, description="Recent per-token accuracy of drafted positions (0..1)."
    )
    tokens_per_second: float | None = Field(
        default=None, ge=0, description="Training throughput, all ranks together."
    )
    eta_seconds: float | None = Field(
        default=None, ge=0, description="Estimated seconds until training finishes."
    )
    updated_at: Timestamp | None = Field(default=None, description="When this was patched.")
    likelihood: TrainingLikelihood | None = Field(
        default=None,
        description=(
            "The likelihood monitor: the target's judgement of the batches scored so far, per "
            "source (spec.audit.likelihood.monitorEverySteps)."
        ),
    )


class CheckpointStatus(StatusModel):
    """The newest committed checkpoint (its COMMITTED.json exists), from the trainer."""

    uri: str | None = Field(default=None, description="s3:// folder of the checkpoint.")
    step: int | None = Field(default=None, ge=0, description="Optimizer step it was taken at.")
    time: Timestamp | None = Field(default=None, description="When it was committed.")
    sha256: Annotated[str, StringConstraints(pattern=SHA256_PATTERN)] | None = Field(
        default=None, description="sha256 of its COMMITTED.json (hex)."
    )


class RegenerationProgress(StatusModel):
    """Regeneration shards and what they produced so far."""

    shards_done: int | None = Field(default=None, ge=0, description="Shards committed.")
    shards_total: int | None = Field(default=None, ge=0, description="Shards in all.")
    shards_skipped: int | None = Field(
        default=None, ge=0, description="Shards found already committed (reruns skip them)."
    )
    samples: int | None = Field(default=None, ge=0, description="Completions committed.")
    samples_total: int | None = Field(default=None, ge=0, description="Prompts to regenerate.")
    output_tokens: int | None = Field(default=None, ge=0, description="Tokens generated.")


class ModelCopyResult(StatusModel):
    """The run's copy of a Hub target (the model stage's result)."""

    uri: str | None = Field(default=None, description="Where every stage loads the target from.")
    revision: str | None = Field(
        default=None, description="The commit the copy was taken at (target.revision resolved)."
    )
    files: int | None = Field(default=None, ge=0, description="Files copied and verified.")
    bytes: int | None = Field(default=None, ge=0, description="Their total size.")
    fetched_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Bytes downloaded from the Hub by the attempt that finished (0 when every "
        "file was already copied by an earlier attempt).",
    )


class TokenizationResult(StatusModel):
    """What tokenization produced (its stage result)."""

    samples: int | None = Field(default=None, ge=0, description="Tokenized samples.")
    tokens: int | None = Field(default=None, ge=0, description="Tokens in all samples.")
    supervised_tokens: int | None = Field(
        default=None, ge=0, description="Tokens with loss_mask 1."
    )
    truncated: int | None = Field(
        default=None, ge=0, description="Samples cut at tokenization.maxSeqLen."
    )
    shards: int | None = Field(default=None, ge=0, description="Parquet shards written.")
    manifest_uri: str | None = Field(default=None, description="s3:// URI of _SUCCESS.json.")


class EvaluationResult(StatusModel):
    """What evaluation measured (its stage result)."""

    acceptance_length: float | None = Field(
        default=None, ge=0, description="Mean tokens accepted per draft block (pooled)."
    )
    per_position_acceptance: list[float] | None = Field(
        default=None, description="Acceptance rate of each block position."
    )
    prompts: int | None = Field(default=None, ge=0, description="Prompts evaluated.")
    report_uri: str | None = Field(default=None, description="s3:// URI of acceptance.json.")


class StageProgress(StatusModel):
    """Per-stage progress and results."""

    model: ModelCopyResult | None = Field(
        default=None, description="The run's copy of a target named by its Hub id."
    )
    canary: RegenerationProgress | None = Field(
        default=None,
        description="The canary: a fixed sample of every source regenerated before the fan-out.",
    )
    regeneration: RegenerationProgress | None = Field(
        default=None, description="Regeneration progress."
    )
    tokenization: TokenizationResult | None = Field(
        default=None, description="Tokenization result."
    )
    evaluation: EvaluationResult | None = Field(default=None, description="Evaluation result.")


class AuditViolation(StatusModel):
    """One failed check of a gate."""

    check: str = Field(
        description=(
            "The check's name, e.g. stub_rate (docs/audit-gates.md). Its threshold is the "
            "spec.audit field named max/min + the check in camelCase (stub_rate: maxStubRate), "
            "given in thresholdField."
        )
    )
    threshold_field: str | None = Field(
        default=None,
        description=(
            "The spec field that sets the threshold, e.g. spec.audit.maxStubRate or "
            "spec.audit.completions.maxTruncationRate: edit it, then retry."
        ),
    )
    value: float | None = Field(default=None, description="Measured value, whole dataset.")
    threshold: float | None = Field(default=None, description="The threshold it crossed.")
    message: str | None = Field(
        default=None,
        description="What is wrong, in words, quoting the failing source's own value.",
    )
    sources: list[str] | None = Field(
        default=None, description="Data sources where the check fails."
    )
    worst_source: str | None = Field(
        default=None,
        description="The source furthest past the threshold (unset when the whole dataset fails).",
    )
    worst_value: float | None = Field(
        default=None, description="The value to quote: worstSource's, else the whole dataset's."
    )


class AuditResult(StatusModel):
    """The outcome of one audit gate."""

    verdict: Verdict = Field(description="pass or fail.")
    approved: bool | None = Field(
        default=None,
        description="true when a failed gate was accepted by annotation dflash.dev/approve-audit.",
    )
    violations: list[AuditViolation] | None = Field(
        default=None, description="Failed checks, most severe first."
    )
    metrics: dict[str, float] | None = Field(
        default=None, description="Key figures of the gate (rates, counts, percentiles)."
    )
    report_uri: str | None = Field(
        default=None, description="s3:// folder of the full report (report.md, histograms)."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the gate ran for."
    )
    attempt: int | None = Field(default=None, ge=1, description="Attempt of the gate's stage.")
    time: Timestamp | None = Field(default=None, description="When the gate finished.")


class AuditStatus(StatusModel):
    """Audit results, per gate."""

    prompts: AuditResult | None = Field(default=None, description="Prompts gate.")
    canary: AuditResult | None = Field(
        default=None, description="The completions gate on the canary's answers alone."
    )
    completions: AuditResult | None = Field(default=None, description="Completions gate.")
    tokens: AuditResult | None = Field(default=None, description="Tokens gate.")
    training: AuditResult | None = Field(
        default=None,
        description="The likelihood monitor during training (set when it stopped training).",
    )

    def result(self, gate: Gate) -> AuditResult | None:
        return getattr(self, gate.value)  # type: ignore[no-any-return]


class ChildRef(StatusModel):
    """A workload the run created (Job, PyTorchJob, ConfigMap, ...)."""

    kind: str = Field(description="Kind of the child, e.g. Job.")
    api_version: str | None = Field(default=None, description="apiVersion, e.g. batch/v1.")
    name: str = Field(description="Name, in the run's namespace.")
    uid: str | None = Field(default=None, description="UID, to tell a re-created child apart.")
    stage: str | None = Field(default=None, description="Stage it belongs to, e.g. regen.")
    attempt: int | None = Field(default=None, ge=1, description="Attempt number of the stage.")


class Approval(StatusModel):
    """An audit failure accepted by the user (annotation dflash.dev/approve-audit)."""

    gate: Gate = Field(description="The gate accepted.")
    generation: int = Field(ge=0, description="The generation named in the annotation.")
    time: Timestamp | None = Field(default=None, description="When the operator applied it.")


class GpuHours(StatusModel):
    """GPUs held by the run's pods: requested GPUs x wall time of each pod from its start to
    its end (now, while it runs), every attempt and retry included."""

    total: float = Field(default=0.0, ge=0, description="GPU-hours of the whole run.")
    by_stage: dict[str, float] | None = Field(
        default=None, description="GPU-hours per stage, e.g. {regen: 412.5, train: 3120.0}."
    )
    by_attempt: dict[str, float] | None = Field(
        default=None,
        description=(
            "GPU-hours per <stage>-<attempt> (the largest value seen while its pods existed: "
            "what pods that are gone used is never forgotten)."
        ),
    )
    updated_at: Timestamp | None = Field(
        default=None,
        description="When the running pods' share was last added (at most every 5 minutes).",
    )
