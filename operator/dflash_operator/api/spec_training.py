"""`spec.training` (the user-facing subset of the trainer config, docs/trainer-config.md) and
`spec.evaluation` (acceptance length of the trained drafter).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from dflash_operator.api.base import (
    ApiModel,
    DataUri,
    DnsSubdomain,
    Image,
    NodePoolName,
    Rule,
    stage_deadline,
)
from dflash_operator.api.naming import MAX_ATTEMPT, MAX_TRAINING_NODES
from dflash_operator.api.spec_data import SourceFormat
from dflash_operator.api.spec_resources import Resources, resources_field

# The paper's recipe (App. A.1): 6 epochs, AdamW at 6e-4, cosine with 4% warmup, clip 1.0.
MAX_ACCOUNT_ANNOTATIONS = 16
DEFAULT_EPOCHS = 6
MAX_EPOCHS = 1000
DEFAULT_LEARNING_RATE = 6e-4
DEFAULT_WARMUP_RATIO = 0.04
DEFAULT_GRAD_CLIP = 1.0
# SpecForge's Qwen3-8B online recipe: 4 sequences per GPU.
DEFAULT_BATCH_SIZE = 4
MAX_BATCH_SIZE = 1024
MAX_GRAD_ACCUMULATION = 1024
DEFAULT_ANCHORS = 512
MAX_ANCHORS = 16_384
DEFAULT_CHECKPOINT_EVERY = 1000
DEFAULT_KEEP_CHECKPOINTS = 3
MAX_KEEP_CHECKPOINTS = 1000
DEFAULT_MAX_RESTARTS = 3
# Attempt n of the train stage names its PyTorchJob `<run>-train-<n>`: n <= MAX_ATTEMPT.
MAX_RESTARTS = MAX_ATTEMPT - 1
MAX_PROCESSES_PER_NODE = 64
DEFAULT_EVAL_PROMPTS = 128
MAX_EVAL_PROMPTS = 100_000
DEFAULT_EVAL_NEW_TOKENS = 256


class Launcher(StrEnum):
    """The workload kind that runs distributed training."""

    # TrainJob where the API server serves it, else PyTorchJob (decided once per run).
    AUTO = "auto"
    # Kubeflow Trainer v2: trainer.kubeflow.org/v1alpha1 TrainJob on a ClusterTrainingRuntime.
    TRAINJOB = "trainjob"
    # Kubeflow training-operator v1: kubeflow.org/v1 PyTorchJob.
    PYTORCHJOB = "pytorchjob"


class Strategy(StrEnum):
    """How the drafter is replicated across ranks (the target is always frozen per rank)."""

    DDP = "ddp"
    # The trainer's `fsdp2` (PyTorch FSDP2, fully_shard).
    FSDP = "fsdp"


class TrainingSpec(ApiModel):
    """Online DFlash training: the frozen target runs in every rank and feeds the drafter.

    Fields marked "train.yaml: key" become that key of the trainer config
    (docs/trainer-config.md); the rest shape the TrainJob or PyTorchJob.
    """

    rules = (
        Rule(
            rule="!has(self.runtimeRef) || !has(self.launcher) || self.launcher != 'pytorchjob'",
            message="runtimeRef is not accepted with launcher pytorchjob: it names a "
            "ClusterTrainingRuntime of a TrainJob",
            check=lambda t: t.runtime_ref is None or t.launcher != Launcher.PYTORCHJOB,
            field_path=".runtimeRef",
        ),
    )

    launcher: Launcher | None = Field(
        default=None,
        description=(
            "Workload kind for distributed training: trainjob (Kubeflow Trainer v2, "
            "trainer.kubeflow.org/v1alpha1 TrainJob), pytorchjob (Kubeflow training-operator, "
            "kubeflow.org/v1 PyTorchJob), or auto (TrainJob where the cluster serves it, else "
            "PyTorchJob). Unset: the operator's default (chart value training.defaultLauncher, "
            "auto unless changed). Decided once, when training first starts, and recorded in "
            "status.launcher: a run never changes kind while in flight."
        ),
    )
    runtime_ref: DnsSubdomain | None = Field(
        default=None,
        description=(
            "Name of the ClusterTrainingRuntime a TrainJob references (the platform's own "
            "torch runtime, say torch-distributed). Unset: the runtime the chart ships "
            "(training.runtime.name). Its trainer replicated Job and container must be named "
            "node, as in Kubeflow's torch runtimes. Not accepted with launcher pytorchjob."
        ),
    )
    image: Image | None = Field(
        default=None,
        description="Container image of the training pods. Unset: the operator's default.",
    )
    active_deadline_seconds: int | None = stage_deadline("training")
    node_pool: NodePoolName | None = Field(
        default=None,
        description=(
            "Node pool (from the operator's configuration) to train on. Unset: the operator's "
            "default pool for training (rtx-pro-6000 in the default configuration)."
        ),
    )
    nodes: int = Field(
        default=1,
        ge=1,
        le=MAX_TRAINING_NODES,
        description="Nodes (pods) to train on: one PyTorchJob Master plus nodes-1 Workers.",
    )
    gpus_per_node: int | None = Field(
        default=None,
        ge=1,
        le=MAX_PROCESSES_PER_NODE,
        description=(
            "Training processes (one per GPU) per node. Unset: all GPUs of a node of the "
            "pool. On a CPU pool: processes per pod. More than the pool offers is refused."
        ),
    )
    strategy: Strategy = Field(
        default=Strategy.DDP,
        description=(
            "ddp (drafter and optimizer state replicated on every rank) or fsdp (sharded "
            "across ranks with FSDP2: for large drafters next to a large frozen target). "
            "(train.yaml: distributed.strategy, fsdp as fsdp2)"
        ),
    )
    activation_checkpointing: bool = Field(
        default=False,
        description=(
            "Keep only each draft layer's input for backward and recompute the layer: "
            "activation memory falls from ~14 GiB to ~4 GiB per sequence on a 27B target, "
            "for one more drafter forward per step. (train.yaml: "
            "drafter.activation_checkpointing)"
        ),
    )
    epochs: int = Field(
        default=DEFAULT_EPOCHS,
        ge=1,
        le=MAX_EPOCHS,
        description="Passes over the training data. (train.yaml: optim.epochs)",
    )
    learning_rate: float = Field(
        default=DEFAULT_LEARNING_RATE,
        gt=0,
        le=1,
        description=(
            "Peak AdamW learning rate, reached after warmup, then cosine decay. (train.yaml: "
            "optim.lr)"
        ),
    )
    warmup_ratio: float = Field(
        default=DEFAULT_WARMUP_RATIO,
        ge=0,
        lt=1,
        description=(
            "Share of all steps spent warming the learning rate up linearly (0 <= x < 1). "
            "(train.yaml: optim.warmup_ratio)"
        ),
    )
    batch_size: int = Field(
        default=DEFAULT_BATCH_SIZE,
        ge=1,
        le=MAX_BATCH_SIZE,
        description=(
            "Sequences per GPU per step. The global batch is batchSize x nodes x gpusPerNode "
            "x gradientAccumulationSteps. (train.yaml: data.batch_size)"
        ),
    )
    gradient_accumulation_steps: int = Field(
        default=1,
        ge=1,
        le=MAX_GRAD_ACCUMULATION,
        description=(
            "Micro-batches accumulated before each optimizer step. (train.yaml: optim.grad_accum)"
        ),
    )
    max_steps: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Stop after this many optimizer steps, before the epochs are done (smoke tests). "
            "Unset: train for all epochs. (train.yaml: optim.max_steps)"
        ),
    )
    anchors_per_sequence: int = Field(
        default=DEFAULT_ANCHORS,
        ge=1,
        le=MAX_ANCHORS,
        description=(
            "Random block starts drawn per sequence from the supervised tokens, resampled "
            "every epoch; each anchor trains one draft block. (train.yaml: "
            "objective.anchors_per_sequence)"
        ),
    )
    loss_decay_gamma: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description=(
            "Weight of block position k in the loss is exp(-(k-1)/gamma): early positions "
            "matter most. Unset: from drafter.blockSize, as in the paper (7 for 16, 5 for 10, "
            "4 for 8). (train.yaml: objective.gamma)"
        ),
    )
    grad_clip: float = Field(
        default=DEFAULT_GRAD_CLIP,
        ge=0,
        description=(
            "Clip the gradient norm to this value; 0 disables clipping. (train.yaml: "
            "optim.grad_clip)"
        ),
    )
    seed: int = Field(
        default=0, ge=0, description="Seed of anchors, shuffling and init. (train.yaml: seed)"
    )
    checkpoint_every_steps: int = Field(
        default=DEFAULT_CHECKPOINT_EVERY,
        ge=1,
        description=(
            "Commit a checkpoint to S3 every this many optimizer steps (and at the end). "
            "Training resumes from the newest committed checkpoint after any failure. (train.yaml: "
            "checkpoint.every_steps)"
        ),
    )
    keep_checkpoints: int = Field(
        default=DEFAULT_KEEP_CHECKPOINTS,
        ge=1,
        le=MAX_KEEP_CHECKPOINTS,
        description=(
            "Committed checkpoints kept in S3; older ones are deleted. (train.yaml: "
            "checkpoint.keep_last)"
        ),
    )
    max_restarts: int = Field(
        default=DEFAULT_MAX_RESTARTS,
        ge=0,
        le=MAX_RESTARTS,
        description=(
            "Times a failed training job is recreated (resuming from the newest committed "
            f"checkpoint) before the run fails. At most {MAX_RESTARTS}."
        ),
    )
    resources: Resources | None = resources_field("training pod")
    service_account_annotations: dict[str, str] | None = Field(
        default=None,
        max_length=MAX_ACCOUNT_ANNOTATIONS,
        description=(
            "Annotations of the <run>-trainer ServiceAccount the operator creates when training "
            "starts, for a cloud identity: eks.amazonaws.com/role-arn (IRSA), "
            "iam.gke.io/gcp-service-account (Workload Identity). Read when the account is "
            "created."
        ),
    )


class EvalPrompts(ApiModel):
    """Held-out prompts for measuring acceptance length."""

    uri: DataUri = Field(description="Where the prompts are (same forms as data.sources[].uri).")
    format: SourceFormat = Field(
        description="Record layout (same values as data.sources[].format)."
    )


class EvaluationSpec(ApiModel):
    """Speculative decoding with the trained drafter on held-out prompts: acceptance length."""

    rules = (
        Rule(
            rule="!has(self.prompts) || self.prompts.format != 'regenerated'",
            message="prompts.format regenerated is not accepted: evaluation needs prompts",
            check=lambda e: e.prompts is None or e.prompts.format != SourceFormat.REGENERATED,
            field_path=".prompts.format",
        ),
    )

    enabled: bool = Field(default=True, description="Measure acceptance length after training.")
    prompts: EvalPrompts | None = Field(
        default=None,
        description=(
            "Prompts to evaluate on, chat-templated with the target's tokenizer and "
            "target.thinking (eval.yaml: prompts.source). Unset: prompts held out of the "
            "tokenized training data, about 1.5 x maxPrompts samples chosen by a hash of the "
            "sample id and never trained on (train.yaml: data.holdout_fraction)."
        ),
    )
    max_prompts: int = Field(
        default=DEFAULT_EVAL_PROMPTS,
        ge=1,
        le=MAX_EVAL_PROMPTS,
        description="Prompts evaluated (eval.yaml: prompts.num_prompts).",
    )
    max_new_tokens: int = Field(
        default=DEFAULT_EVAL_NEW_TOKENS,
        ge=1,
        le=32_768,
        description="Tokens generated per prompt (eval.yaml: max_new_tokens).",
    )
    temperature: float = Field(
        default=0.0,
        ge=0,
        le=2,
        description=(
            "Sampling temperature of the target during evaluation; 0 is greedy. Above 0 the "
            "drafts are verified by speculative sampling, which keeps the target's own "
            "distribution (eval.yaml: temperature)."
        ),
    )
    image: Image | None = Field(
        default=None,
        description="Container image of the evaluation pod. Unset: the operator's default.",
    )
    active_deadline_seconds: int | None = stage_deadline("evaluation")
    resources: Resources | None = resources_field("evaluation pod")
    node_pool: NodePoolName | None = Field(
        default=None,
        description="Node pool for evaluation. Unset: the operator's default for training.",
    )
