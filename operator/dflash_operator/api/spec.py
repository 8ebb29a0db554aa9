"""`DFlashRunSpec`: the whole user-facing pipeline definition, and its cross-field rules.

Sections live in `spec_model.py`, `spec_data.py`, `spec_audit.py`, `spec_training.py` and
`spec_storage.py`; this module assembles them and makes target, drafter and data immutable.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dflash_operator.api.base import (
    MAX_DEADLINE_SECONDS,
    ApiModel,
    DnsLabel,
    DnsSubdomain,
    Rule,
    immutable,
    nested,
)
from dflash_operator.api.constants import Stage
from dflash_operator.api.spec_audit import AuditSpec
from dflash_operator.api.spec_data import (
    DataSpec,
    RegenerationSpec,
    SourceFormat,
    TokenizationSpec,
)
from dflash_operator.api.spec_model import DrafterSpec, TargetSpec
from dflash_operator.api.spec_storage import (
    HfTokenSecretRef,
    LocalObjectReference,
    StorageSpec,
)
from dflash_operator.api.spec_training import EvaluationSpec, TrainingSpec

# The spec section each pipeline stage is configured by (its image, pool, deadline, ...).
STAGE_SECTIONS: dict[Stage, str] = {
    Stage.CANARY: "regeneration",
    Stage.REGEN: "regeneration",
    Stage.SCORE: "regeneration",
    Stage.AUDIT_CANARY: "audit",
    Stage.AUDIT_COMPLETIONS: "audit",
    Stage.AUDIT_TOKENS: "audit",
    Stage.TOKENIZE: "tokenization",
    Stage.TRAIN: "training",
    Stage.EVAL: "evaluation",
}

MAX_PULL_SECRETS = 16
MAX_GPU_HOURS = 10_000_000

# 30 days: the longest a finished run's children may linger before cleanup.
MAX_TTL_SECONDS = 30 * 24 * 3600


def _regenerated_only(spec: DFlashRunSpec) -> bool:
    return spec.regeneration.enabled or all(
        source.format == SourceFormat.REGENERATED for source in spec.data.sources
    )


class BudgetSpec(ApiModel):
    """What the run may spend."""

    max_gpu_hours: float | None = Field(
        default=None,
        gt=0,
        le=MAX_GPU_HOURS,
        description=(
            "GPU-hours (requested GPUs x pod wall time, retries included) the run may use. "
            "Reached: the running stage is suspended (condition BudgetExceeded) until the budget "
            "is raised or annotation dflash.dev/extra-gpu-hours adds to it. Unset: no limit."
        ),
    )


class DFlashRunSpec(ApiModel):
    """What drafter to train, for which target, from which data, on which node pools."""

    rules = (
        Rule(
            rule=(
                "self.regeneration.enabled || self.data.sources.all(s, s.format == 'regenerated')"
            ),
            message=(
                "regeneration.enabled is false, so every data.sources[].format must be "
                "regenerated (completions already produced by this target); enable "
                "regeneration to use prompts"
            ),
            check=_regenerated_only,
            field_path=".regeneration.enabled",
            describe=lambda spec: (
                "regeneration.enabled is false, so every data.sources[].format must be "
                "regenerated (completions already produced by this target), but "
                + ", ".join(
                    f"{s.name} is {s.format.value}"
                    for s in spec.data.sources
                    if s.format != SourceFormat.REGENERATED
                )
                + "; enable regeneration to use prompts"
            ),
        ),
        Rule(
            rule="self.tokenization.maxSeqLen > self.drafter.blockSize",
            message="tokenization.maxSeqLen must be larger than drafter.blockSize",
            check=lambda spec: spec.tokenization.max_seq_len > spec.drafter.block_size,
            field_path=".tokenization.maxSeqLen",
            describe=lambda spec: (
                f"tokenization.maxSeqLen={spec.tokenization.max_seq_len} is not accepted: it "
                f"must be larger than drafter.blockSize ({spec.drafter.block_size})"
            ),
        ),
    )

    target: Annotated[TargetSpec, immutable("target")] = Field(
        description="The target model the drafter accelerates. Immutable."
    )
    drafter: Annotated[DrafterSpec, immutable("drafter")] = nested(
        DrafterSpec, "The drafter's architecture. Immutable."
    )
    data: Annotated[DataSpec, immutable("data")] = Field(
        description="Prompt (or completion) sources. Immutable."
    )
    regeneration: RegenerationSpec = nested(
        RegenerationSpec, "Regeneration of every answer by the target (vLLM Jobs)."
    )
    tokenization: TokenizationSpec = nested(
        TokenizationSpec, "Chat templating and tokenization of the completions."
    )
    audit: AuditSpec = nested(
        AuditSpec, "Data-audit gate thresholds. Editable at any time; a retry uses the new ones."
    )
    training: TrainingSpec = nested(TrainingSpec, "Distributed online training of the drafter.")
    evaluation: EvaluationSpec = nested(
        EvaluationSpec, "Acceptance-length evaluation of the trained drafter."
    )
    storage: StorageSpec = Field(
        description="S3 location of every artifact of the run, and its credentials Secret."
    )
    suspend: bool = Field(
        default=False,
        description=(
            "true stops the running stage's children (keeping all committed output); false "
            "resumes where the run left off. Editable at any time."
        ),
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=60,
        le=MAX_DEADLINE_SECONDS,
        description=(
            "Longest time the whole run may take, from its first stage's start to success. "
            "Past it the running stage is stopped (its pods go, nothing more is created) and the "
            "run fails, naming the stage it was in. Unset: no limit."
        ),
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TTL_SECONDS,
        description=(
            "Delete the run's finished children (Jobs, PyTorchJob, pods) this many seconds "
            "after the run succeeds or fails. The DFlashRun and its S3 artifacts stay. "
            "Unset: children are kept."
        ),
    )
    queue_name: DnsLabel | None = Field(
        default=None,
        description=(
            "Kueue LocalQueue for the run's workloads (label kueue.x-k8s.io/queue-name). "
            "Unset: no queueing."
        ),
    )
    priority_class_name: DnsSubdomain | None = Field(
        default=None, description="PriorityClass of the run's pods. Unset: the cluster default."
    )
    budget: BudgetSpec = nested(BudgetSpec, "GPU-hour budget of the run. Editable at any time.")
    hf_token_secret_ref: HfTokenSecretRef | None = Field(
        default=None,
        description=(
            "Secret with a Hugging Face token for gated or private models (env HF_TOKEN of the "
            "pods that load the target or its tokenizer, as a secretKeyRef: the operator never "
            "reads it). Never put the token itself in the spec. Unset: anonymous downloads; a "
            "target on s3:// or pvc:// is loaded offline (HF_HUB_OFFLINE=1) either way."
        ),
    )
    service_account_name: DnsSubdomain | None = Field(
        default=None,
        description=(
            "ServiceAccount (in the run's namespace) of every stage pod but training's, for a "
            "cloud identity such as IRSA or GKE Workload Identity; no API token is mounted. "
            "Training runs as <run>-trainer (see training.serviceAccountAnnotations). Unset: "
            "the node pool's, else the namespace's default account."
        ),
    )
    image_pull_secrets: list[LocalObjectReference] | None = Field(
        default=None,
        max_length=MAX_PULL_SECRETS,
        description=(
            "Secrets to pull the stage images with, added to the node pool's "
            "imagePullSecrets. Unset: the pool's (or the ServiceAccount's) only."
        ),
    )

    def section_of(self, stage: Stage) -> ApiModel | None:
        """The section that configures `stage` (None for cleanup and prune Jobs)."""
        name = STAGE_SECTIONS.get(stage)
        return getattr(self, name) if name is not None else None
