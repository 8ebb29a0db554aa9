"""The DFlashRun vocabulary: API identity, phases, stages, gates, condition types, reasons
(with message templates), annotation and label keys. The operator imports these; nothing
here does I/O. Child naming lives in `naming.py`; the models in `spec*.py` / `status*.py`.
"""

from __future__ import annotations

from enum import StrEnum

# --- API identity -------------------------------------------------------------------------
GROUP = "dflash.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "DFlashRun"
LIST_KIND = "DFlashRunList"
PLURAL = "dflashruns"
SINGULAR = "dflashrun"
SHORT_NAMES = ("dfr",)
CATEGORIES = ("dflash",)
CRD_NAME = f"{PLURAL}.{GROUP}"

# --- annotation and label keys ------------------------------------------------------------
# Set by the user (or `kubectl dflash retry`): a new value retries the failed stage once.
ANNOTATION_RETRY = f"{GROUP}/retry"
# Set by the user to accept a failed audit gate: "<gate>@<generation>[,<gate>@<generation>]".
ANNOTATION_APPROVE_AUDIT = f"{GROUP}/approve-audit"
# Set by the user: GPU-hours granted on top of spec.budget.maxGpuHours (resumes a run the
# budget stopped without editing its spec, e.g. from a GitOps-managed run).
ANNOTATION_EXTRA_GPU_HOURS = f"{GROUP}/extra-gpu-hours"
# Put by the operator on every child it creates.
LABEL_RUN = f"{GROUP}/run"
LABEL_STAGE = f"{GROUP}/stage"
LABEL_ATTEMPT = f"{GROUP}/attempt"
# The UID of the run a child belongs to, on children without an ownerReference (the cleanup Job).
LABEL_RUN_UID = f"{GROUP}/run-uid"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# Kueue: the queue a workload asks for, and (on a Workload) the UID of the job it admits.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MANAGED_BY = "dflash-operator"


class Phase(StrEnum):
    """Where a run is in its life (`status.phase`). See `docs/crd-reference.md`."""

    PENDING = "Pending"
    # A target named by its Hub id is copied once into the run's S3 root (model/).
    FETCHING_MODEL = "FetchingModel"
    # A fixed sample of every source is regenerated and audited before the fan-out.
    CANARY = "Canary"
    AUDITING_CANARY = "AuditingCanary"
    REGENERATING = "Regenerating"
    # Imported completions (regeneration off): copied into regen/, a sample scored by the target.
    SCORING = "Scoring"
    AUDITING_COMPLETIONS = "AuditingCompletions"
    TOKENIZING = "Tokenizing"
    AUDITING_TOKENS = "AuditingTokens"
    TRAINING = "Training"
    EVALUATING = "Evaluating"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    # A gate found broken data: the run waits for a retry or an approval (not terminal).
    AUDIT_FAILED = "AuditFailed"
    SUSPENDED = "Suspended"

    def is_terminal(self) -> bool:
        """Terminal phases are sticky: no child is ever created again after one."""
        return self in _TERMINAL_PHASES


_TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.FAILED})

PHASE_MEANINGS: dict[Phase, str] = {
    Phase.PENDING: "Accepted; no child created yet.",
    Phase.FETCHING_MODEL: (
        "A target named by its Hugging Face id is downloaded once, verified (sha256) and "
        "copied to <run root>/model/; every later stage loads it from there."
    ),
    Phase.CANARY: (
        "The canary regenerates a fixed sample of every source (regeneration.canary) before "
        "the shards fan out."
    ),
    Phase.AUDITING_CANARY: "The completions gate judges the canary's answers alone.",
    Phase.REGENERATING: "The target regenerates every answer (Indexed Job, one index per shard).",
    Phase.SCORING: (
        "Imported completions (regeneration.enabled false) are copied into the run and a "
        "sample of every source is scored under the target (audit.likelihood)."
    ),
    Phase.AUDITING_COMPLETIONS: "The completions gate checks the regenerated answers.",
    Phase.TOKENIZING: "Completions are chat-templated and tokenized.",
    Phase.AUDITING_TOKENS: "The tokens gate checks loss masks, anchors and truncation.",
    Phase.TRAINING: "Distributed online training (PyTorchJob); checkpoints go to S3.",
    Phase.EVALUATING: "Acceptance length of the exported drafter is measured.",
    Phase.SUCCEEDED: "Terminal. status.drafterUri holds the servable drafter.",
    Phase.FAILED: "Terminal. status.message and the Failed condition say why.",
    Phase.AUDIT_FAILED: (
        "A gate stopped the run before GPU time was spent on broken data. Fix the data and "
        "retry, or accept the failure (annotations below). Not terminal."
    ),
    Phase.SUSPENDED: "spec.suspend is true: children stopped; resumes where it left off.",
}


class Stage(StrEnum):
    """A child of a run; the value is the middle part of the child's name (`naming.py`)."""

    MODEL = "model"
    CANARY = "canary"
    AUDIT_CANARY = "audit-canary"
    REGEN = "regen"
    # Imported completions: copied into regen/, and a sample of each source scored.
    SCORE = "score"
    AUDIT_COMPLETIONS = "audit-completions"
    TOKENIZE = "tokenize"
    AUDIT_TOKENS = "audit-tokens"
    TRAIN = "train"
    EVAL = "eval"
    CLEANUP = "cleanup"
    # cleanupPolicy DeleteIntermediate: after success, delete what only fed training.
    PRUNE = "prune"
    CONFIG = "config"


class Gate(StrEnum):
    """A data-audit gate; the same names as the trainer's `dflash-audit --gate`, plus the
    canary: the completions gate on the canary's answers alone (`trainer_gate`), and
    training: the likelihood monitor that judges the batches while the drafter trains."""

    PROMPTS = "prompts"
    CANARY = "canary"
    COMPLETIONS = "completions"
    TOKENS = "tokens"
    TRAINING = "training"

    @property
    def approvable(self) -> bool:
        """Whether `dflash.dev/approve-audit` can accept the gate's failure. The training
        monitor cannot: it stopped a training half-way (raise the limit, or switch the
        monitor off, then retry the train stage)."""
        return self != Gate.TRAINING

    @property
    def trainer_gate(self) -> str:
        """The `dflash-audit --gate` that judges this gate's data."""
        return Gate.COMPLETIONS.value if self == Gate.CANARY else self.value


class Verdict(StrEnum):
    """The outcome of one audit gate."""

    PASS = "pass"  # noqa: S105 (a verdict, not a password)
    FAIL = "fail"


class ConditionType(StrEnum):
    """`status.conditions[].type`: one per pipeline stage plus the run-level summaries."""

    MODEL_FETCHED = "ModelFetched"
    CANARY_REGENERATED = "CanaryRegenerated"
    CANARY_AUDITED = "CanaryAudited"
    REGENERATED = "Regenerated"
    LIKELIHOOD_SCORED = "LikelihoodScored"
    COMPLETIONS_AUDITED = "CompletionsAudited"
    TOKENIZED = "Tokenized"
    TOKENS_AUDITED = "TokensAudited"
    TRAINED = "Trained"
    EVALUATED = "Evaluated"
    SUSPENDED = "Suspended"
    ADMITTED = "Admitted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DATA_AUDIT_PASSED = "DataAuditPassed"
    CLEANED_UP = "CleanedUp"
    BUDGET_EXCEEDED = "BudgetExceeded"


CONDITION_MEANINGS: dict[ConditionType, str] = {
    ConditionType.MODEL_FETCHED: (
        "Only for a target named by its Hugging Face id: its files are verified and copied to "
        "<run root>/model/ at a pinned commit."
    ),
    ConditionType.CANARY_REGENERATED: "The canary's answers are committed in S3.",
    ConditionType.CANARY_AUDITED: "The completions gate ran on the canary (see DataAuditPassed).",
    ConditionType.REGENERATED: "Every shard's completions are committed in S3.",
    ConditionType.LIKELIHOOD_SCORED: (
        "Only for imported completions (regeneration.enabled false): they are in the run's "
        "regen/ and a sample of every source was scored under the target."
    ),
    ConditionType.COMPLETIONS_AUDITED: "The completions gate ran (see DataAuditPassed).",
    ConditionType.TOKENIZED: "Tokenized data and its manifest are committed in S3.",
    ConditionType.TOKENS_AUDITED: "The tokens gate ran (see DataAuditPassed).",
    ConditionType.TRAINED: "Training finished and the drafter was exported.",
    ConditionType.EVALUATED: "Acceptance length was measured.",
    ConditionType.SUSPENDED: "True while spec.suspend holds the run.",
    ConditionType.BUDGET_EXCEEDED: (
        "Only with spec.budget.maxGpuHours: True while the run's GPU-hours reached its budget "
        "and its running stage is suspended; False once the budget was raised."
    ),
    ConditionType.ADMITTED: (
        "Only when a Kueue queue applies to the current stage: False (Queued) while Kueue "
        "holds its Job / PyTorchJob, with Kueue's own message (ClusterQueue, missing quota); "
        "True once admitted."
    ),
    ConditionType.SUCCEEDED: "The run finished with a drafter.",
    ConditionType.FAILED: "The run failed for good; the message says why.",
    ConditionType.DATA_AUDIT_PASSED: (
        "False when a gate failed; the message names each violated check, its value and threshold."
    ),
    ConditionType.CLEANED_UP: (
        "Only with storage.cleanupPolicy DeleteIntermediate, after success: True once the "
        "intermediate S3 artifacts are deleted, False if that failed (the drafter is kept "
        "either way)."
    ),
}


class ConditionStatus(StrEnum):
    """`metav1.ConditionStatus`."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Reason(StrEnum):
    """`status.conditions[].reason`: CamelCase, each paired with a message template.

    `Reason.X.message(**fields)` fills the template; a missing field raises KeyError, so a
    typo in the operator fails its unit tests instead of printing a half-empty message.
    """

    PENDING = "Pending"
    STAGE_RUNNING = "StageRunning"
    STAGE_SUCCEEDED = "StageSucceeded"
    STAGE_SKIPPED = "StageSkipped"
    STAGE_FAILED = "StageFailed"
    # A child ended but its result (termination message) cannot be read or validated.
    STAGE_RESULT_UNREADABLE = "StageResultUnreadable"
    RETRIES_EXHAUSTED = "RetriesExhausted"
    RETRY_REQUESTED = "RetryRequested"
    SPEC_CHANGED = "SpecChanged"
    CHILD_LOST = "ChildLost"
    CHILD_CREATE_FAILED = "ChildCreateFailed"
    TRAINING_OPERATOR_MISSING = "TrainingOperatorMissing"
    # The launcher of a run's training needs an API the cluster does not serve.
    TRAINING_API_MISSING = "TrainingApiMissing"
    # A failed workload that does not restart itself (TrainJob) followed by the next attempt.
    WORKLOAD_RESTARTED = "WorkloadRestarted"
    OBJECT_MISSING = "ObjectMissing"
    AUDIT_PENDING = "AuditPending"
    AUDIT_PASSED = "AuditPassed"
    AUDIT_FAILED = "AuditFailed"
    AUDIT_APPROVED = "AuditApproved"
    # The training likelihood monitor stopped training (its gate: Gate.TRAINING).
    TRAINING_AUDIT_FAILED = "TrainingAuditFailed"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    NOT_SUSPENDED = "NotSuspended"
    QUEUED = "Queued"
    BUDGET_EXCEEDED = "BudgetExceeded"
    WITHIN_BUDGET = "WithinBudget"
    GPU_HOURS_SAVED = "GpuHoursSaved"
    ADMITTED = "Admitted"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    TRAINING_RESUMED = "TrainingResumed"
    SUCCEEDED = "Succeeded"
    INVALID_SPEC = "InvalidSpec"
    UNKNOWN_NODE_POOL = "UnknownNodePool"
    TRAINING_WONT_FIT = "TrainingWontFit"
    MEMORY_CHECK_SKIPPED = "MemoryCheckSkipped"
    GENERATION_LONGER_THAN_TRAINING = "GenerationLongerThanTraining"
    CLEANUP_STARTED = "CleanupStarted"
    ARTIFACTS_DELETED = "ArtifactsDeleted"
    CLEANUP_FAILED = "CleanupFailed"

    @property
    def template(self) -> str:
        return _REASON_TEMPLATES[self]

    def message(self, **fields: object) -> str:
        """The condition message for this reason, e.g. `Reason.STAGE_FAILED.message(...)`."""
        return self.template.format(**fields)


_REASON_TEMPLATES: dict[Reason, str] = {
    Reason.PENDING: "Waiting for the operator to start the run",
    Reason.STAGE_RUNNING: "{stage} is running (attempt {attempt}): {progress}",
    Reason.STAGE_SUCCEEDED: "{stage} finished: {summary}",
    Reason.STAGE_SKIPPED: "{stage} skipped: {why}",
    Reason.STAGE_FAILED: "{stage} failed on attempt {attempt}: {error}",
    Reason.STAGE_RESULT_UNREADABLE: (
        "{stage} ended on attempt {attempt} but its result cannot be trusted: {problem}. "
        "Nothing of it is used. Read the pod's log, then retry with: kubectl annotate dfr {run} "
        + ANNOTATION_RETRY
        + "={stage} --overwrite"
    ),
    Reason.RETRIES_EXHAUSTED: (
        "{stage} failed {attempts} times (limit {limit}): {error}. Fix the cause, then retry "
        "with: kubectl annotate dfr {run} " + ANNOTATION_RETRY + "=<any new value> --overwrite"
    ),
    Reason.RETRY_REQUESTED: (
        "Retry of {stage} requested by annotation " + ANNOTATION_RETRY + "={token}; "
        "starting attempt {attempt}"
    ),
    Reason.SPEC_CHANGED: (
        "{stage} restarts as attempt {attempt} to apply the edit of {fields} "
        "(generation {generation}); {kept}"
    ),
    Reason.CHILD_LOST: "{kind} {name} disappeared before it finished; recreating it",
    Reason.CHILD_CREATE_FAILED: "Could not create {kind} {name}: {error}",
    Reason.TRAINING_OPERATOR_MISSING: (
        "This cluster does not serve {kind} ({api_version}): {install}. {stage} starts when "
        "the CRD appears; no operator restart is needed"
    ),
    Reason.TRAINING_API_MISSING: (
        "{stage} cannot start: {problem}. It starts when the API is served; no operator "
        "restart is needed"
    ),
    Reason.WORKLOAD_RESTARTED: (
        "{kind} {name} failed ({error}); {stage} restarts as attempt {attempt} from the newest "
        "checkpoint (restart {restart} of {limit}, spec.training.maxRestarts)"
    ),
    Reason.OBJECT_MISSING: (
        "{stage} cannot start: {missing}. Create it, or change the field that names it; "
        "{stage} goes on as soon as it exists, without an operator restart"
    ),
    Reason.AUDIT_PENDING: "The {gate} audit has not run yet",
    Reason.AUDIT_PASSED: "The {gate} audit passed; report: {report_uri}",
    Reason.AUDIT_FAILED: (
        "The {gate} audit failed: {violations}. Report: {report_uri}. Fix the data and retry "
        "(annotation " + ANNOTATION_RETRY + "), or accept the data as it is with: "
        "kubectl annotate dfr {run} " + ANNOTATION_APPROVE_AUDIT + "={gate}@{generation}"
    ),
    Reason.TRAINING_AUDIT_FAILED: (
        "The training likelihood monitor stopped training at step {step}: {violations}. "
        "Report: {report_uri}. Fix the source's data and retry from tokenization (annotation "
        + ANNOTATION_RETRY
        + "=tokenize), or raise spec.audit.likelihood.maxOffDistributionRate (or set "
        "monitorEverySteps: 0) and retry training (" + ANNOTATION_RETRY + "=train); training "
        "resumes from its last checkpoint"
    ),
    Reason.AUDIT_APPROVED: (
        "The {gate} audit failed but was accepted by annotation "
        + ANNOTATION_APPROVE_AUDIT
        + "={gate}@{generation}: {violations}"
    ),
    Reason.SUSPENDED: "spec.suspend is true: {stage} is stopped and resumes where it left off",
    Reason.RESUMED: "spec.suspend is false: resuming {stage}",
    Reason.NOT_SUSPENDED: "The run is not suspended",
    Reason.QUEUED: "{stage} waits in Kueue LocalQueue {queue}: {why}",
    Reason.BUDGET_EXCEEDED: (
        "The run used {used:.2f} of its {budget:g} GPU-hours (spec.budget.maxGpuHours plus "
        "annotation " + ANNOTATION_EXTRA_GPU_HOURS + "): {stage} is suspended, keeping all "
        "committed output. Raise the budget, or: kubectl annotate dfr {run} "
        + ANNOTATION_EXTRA_GPU_HOURS
        + "=<hours> --overwrite"
    ),
    Reason.WITHIN_BUDGET: "The run used {used:.2f} of its {budget:g} GPU-hours",
    Reason.GPU_HOURS_SAVED: (
        "The {gate} gate stopped the run before {stages}: about {hours:,.0f} GPU-hours not "
        "spent (estimate: {basis})"
    ),
    Reason.DEADLINE_EXCEEDED: (
        "The run exceeded spec.activeDeadlineSeconds={seconds} (started {started}) in stage "
        "{stage}; its running pods were stopped. Raise the deadline, then retry with: "
        "kubectl annotate dfr <run> " + ANNOTATION_RETRY + "=<any new value> --overwrite"
    ),
    Reason.ADMITTED: "{stage} admitted by Kueue ClusterQueue {cluster_queue}",
    Reason.TRAINING_RESUMED: "Training resumed from checkpoint {uri} (step {step})",
    Reason.SUCCEEDED: "Drafter exported to {drafter_uri}; acceptance length {acceptance_length}",
    Reason.INVALID_SPEC: "{field}={value} is not accepted: {accepted}",
    Reason.UNKNOWN_NODE_POOL: (
        "{field}={pool} is not a node pool of this operator; configured pools: {pools}"
    ),
    Reason.TRAINING_WONT_FIT: (
        "training needs {needed} per GPU but node pool {pool} has {capacity} (gpuMemory): "
        "{terms}; {fixes}"
    ),
    Reason.MEMORY_CHECK_SKIPPED: "the training memory check was skipped: {why}",
    Reason.GENERATION_LONGER_THAN_TRAINING: (
        "regeneration.maxNewTokens={max_new_tokens} exceeds tokenization.maxSeqLen="
        "{max_seq_len}: answer tokens past position {max_seq_len} of a sample (prompt "
        "included) are generated but never trained. {advice}"
    ),
    Reason.CLEANUP_STARTED: "Job {job} deletes {what} under {root} (cleanupPolicy {policy})",
    Reason.ARTIFACTS_DELETED: "Job {job} deleted {what} under {root}: {summary}",
    Reason.CLEANUP_FAILED: ("{what} under {root} not deleted (cleanupPolicy {policy}): {error}"),
}

# What each cleanupPolicy deletes, in the words of the cleanup reasons above.
CLEANUP_SCOPES: dict[str, str] = {
    "Delete": "the whole run root",
    "DeleteIntermediate": (
        "the intermediate artifacts (regen/, tokenized/, the copy of a Hub target in model/ and "
        "every checkpoint but the newest)"
    ),
}

# metav1.Condition's validation of `reason` (kubernetes apimachinery `ValidateConditions`).
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
CONDITION_REASON_MAX_LENGTH = 1024
CONDITION_TYPE_MAX_LENGTH = 316
CONDITION_MESSAGE_MAX_LENGTH = 32768

# The condition a stage sets when it finishes, and the phase in which it runs.
STAGE_CONDITIONS: dict[Stage, ConditionType] = {
    Stage.MODEL: ConditionType.MODEL_FETCHED,
    Stage.CANARY: ConditionType.CANARY_REGENERATED,
    Stage.AUDIT_CANARY: ConditionType.CANARY_AUDITED,
    Stage.REGEN: ConditionType.REGENERATED,
    Stage.SCORE: ConditionType.LIKELIHOOD_SCORED,
    Stage.AUDIT_COMPLETIONS: ConditionType.COMPLETIONS_AUDITED,
    Stage.TOKENIZE: ConditionType.TOKENIZED,
    Stage.AUDIT_TOKENS: ConditionType.TOKENS_AUDITED,
    Stage.TRAIN: ConditionType.TRAINED,
    Stage.EVAL: ConditionType.EVALUATED,
}
STAGE_PHASES: dict[Stage, Phase] = {
    Stage.MODEL: Phase.FETCHING_MODEL,
    Stage.CANARY: Phase.CANARY,
    Stage.AUDIT_CANARY: Phase.AUDITING_CANARY,
    Stage.REGEN: Phase.REGENERATING,
    Stage.SCORE: Phase.SCORING,
    Stage.AUDIT_COMPLETIONS: Phase.AUDITING_COMPLETIONS,
    Stage.TOKENIZE: Phase.TOKENIZING,
    Stage.AUDIT_TOKENS: Phase.AUDITING_TOKENS,
    Stage.TRAIN: Phase.TRAINING,
    Stage.EVAL: Phase.EVALUATING,
}
GATE_STAGES: dict[Gate, Stage] = {
    Gate.CANARY: Stage.AUDIT_CANARY,
    Gate.COMPLETIONS: Stage.AUDIT_COMPLETIONS,
    Gate.TOKENS: Stage.AUDIT_TOKENS,
}
