"""Command lines of the stage entry points (docs/stage-cli.md, docs/data-contracts.md), as
argument lists. The one place to align when a stage's CLI changes.

Arguments are lists, never shell strings. The kubelet still expands `$(VAR)` in args, so
every value that comes from the spec has its `$` doubled (`$$` is a literal `$`): a spec can
never make a pod print one of its environment variables (e.g. a credential).
"""

from __future__ import annotations

from dflash_operator.api.constants import Gate
from dflash_operator.api.spec import DFlashRunSpec

PYTHON = "python"
# The regen image is vLLM's, whose interpreter is python3 (docs/images.md).
REGEN_PYTHON = "python3"
CONFIG_DIR = "/etc/dflash"
SOURCES_FILE = f"{CONFIG_DIR}/sources.yaml"
THRESHOLDS_FILE = f"{CONFIG_DIR}/thresholds.yaml"
TRAIN_FILE = f"{CONFIG_DIR}/train.yaml"
EVAL_FILE = f"{CONFIG_DIR}/eval.yaml"
CHAT_TEMPLATE_FILE = f"{CONFIG_DIR}/chat_template.jinja"
TERMINATION_LOG = "/dev/termination-log"
# The canary's folder under the run root (dflash_trainer.data.regenerate.canary).
CANARY_FOLDER = "canary"
# The run's copy of a target named by its Hub id (dflash_trainer.model.fetch), under the run root.
MODEL_FOLDER = "model"
# Likelihood scores (dflash_trainer.data.likelihood): the canary's own sample, and the score
# stage's sample of imported completions.
CANARY_SCORES = f"{CANARY_FOLDER}/likelihood"
# The regeneration's top-k: spec.regeneration has no field for it, the stage samples with its
# default (dflash_trainer SamplingSpec.top_k; tests/unit/trainer/test_operator_contract.py).
REGEN_TOP_K = 20
SAMPLE_SCORES = "likelihood/sample"
# Where pvc:// URIs are mounted (children/pod.py); stages resolve pvc://<claim>/<path> here.
PVC_ROOT = "/mnt/pvc"


def escape(value: object) -> str:
    """A spec value as a literal argument: `$` doubled so the kubelet expands nothing."""
    return str(value).replace("$", "$$")


def to_local(uri: str) -> str:
    """pvc://<claim>/<path> -> the path where children/pod.py mounts that claim."""
    if uri.startswith("pvc://"):
        return f"{PVC_ROOT}/{uri.removeprefix('pvc://')}"
    return uri


def _thinking(enabled: bool) -> str:
    return "--enable-thinking" if enabled else "--no-enable-thinking"


def is_hub_model(uri: str) -> bool:
    """A Hugging Face id (not s3://, pvc:// or a path): the model stage copies it first."""
    return not uri.startswith(("s3://", "pvc://", "/"))


def model_uri(spec: DFlashRunSpec, run_root: str) -> str:
    """Where the stages load the target from: the run's copy of a Hub model (at the commit the
    model stage pinned), else the spec's own S3 or PVC folder."""
    if is_hub_model(spec.target.model):
        return f"{run_root.rstrip('/')}/{MODEL_FOLDER}"
    return to_local(spec.target.model)


def build_model_fetch_args(spec: DFlashRunSpec, run_root: str) -> list[str]:
    """`python -m dflash_trainer.model.fetch`: the Hub target, once, verified, into the run root."""
    target = spec.target
    return [
        PYTHON, "-m", "dflash_trainer.model.fetch",
        "--model", escape(target.model),
        *(["--revision", escape(target.revision)] if target.revision else []),
        "--dest", escape(model_uri(spec, run_root)),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def _model_args(spec: DFlashRunSpec, run_root: str) -> list[str]:
    """The target for a stage: the run's copy of a Hub model carries its own pinned revision."""
    args = ["--model", escape(model_uri(spec, run_root))]
    if spec.target.revision and not is_hub_model(spec.target.model):
        args += ["--revision", escape(spec.target.revision)]
    if spec.target.chat_template:
        args += ["--chat-template", CHAT_TEMPLATE_FILE]
    return args


def _engine_args(spec: DFlashRunSpec) -> list[str]:
    """Typed vLLM settings as the stage's own flags; the rest as --engine-arg key=value."""
    engine = spec.regeneration.engine_args
    if engine is None:
        return []
    args = ["--gpu-memory-utilization", str(engine.gpu_memory_utilization)]
    if engine.max_model_len is not None:
        args += ["--max-model-len", str(engine.max_model_len)]
    if engine.max_num_seqs is not None:
        args += ["--max-num-seqs", str(engine.max_num_seqs)]
    if engine.enforce_eager:
        args.append("--enforce-eager")
    passthrough: dict[str, str] = {}
    if engine.max_num_batched_tokens is not None:
        passthrough["max-num-batched-tokens"] = str(engine.max_num_batched_tokens)
    if engine.enable_prefix_caching is not None:
        passthrough["enable-prefix-caching"] = str(engine.enable_prefix_caching).lower()
    if engine.kv_cache_dtype is not None:
        passthrough["kv-cache-dtype"] = engine.kv_cache_dtype.value
    passthrough.update(engine.extra or {})
    for key, value in sorted(passthrough.items()):
        args += ["--engine-arg", escape(f"{key}={value}")]
    return args


def build_regenerate_args(spec: DFlashRunSpec, run_root: str) -> list[str]:
    """One shard of `python -m dflash_trainer.data.regenerate`; the stage reads its shard
    number from JOB_COMPLETION_INDEX (set by the Indexed Job)."""
    return [
        *_regenerate_args(spec, run_root),
        "--shards", str(spec.regeneration.shards),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def build_canary_args(spec: DFlashRunSpec, run_root: str) -> list[str]:
    """The canary: the same engine and sampling as the shards, on a fixed sample per source,
    which it then scores under the target it loaded (tokenized as training will see it)."""
    return [
        *_regenerate_args(spec, run_root),
        "--canary-samples-per-source", str(spec.regeneration.canary.samples_per_source),
        "--score-likelihood",
        "--max-seq-len", str(spec.tokenization.max_seq_len),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def _regenerate_args(spec: DFlashRunSpec, run_root: str) -> list[str]:
    regen = spec.regeneration
    return [
        REGEN_PYTHON, "-m", "dflash_trainer.data.regenerate",
        "--run-root", escape(run_root),
        "--sources", SOURCES_FILE,
        *_model_args(spec, run_root),
        "--dtype", spec.target.dtype.value,
        _thinking(spec.target.thinking),
        "--engine", regen.engine.value,
        "--max-tokens", str(regen.max_new_tokens),
        "--temperature", str(regen.temperature),
        "--top-p", str(regen.top_p),
        "--seed", str(regen.seed),
        "--tensor-parallel-size", str(regen.tensor_parallel),
        *_engine_args(spec),
    ]  # fmt: skip


def build_score_args(spec: DFlashRunSpec, run_root: str) -> list[str]:
    """`python -m dflash_trainer.data.likelihood`: imported completions (regeneration off)
    copied into regen/, then `audit.likelihood.samplesPerSource` rows of every source scored
    under the target, each source judged against the sampling it declares
    (`data.sources[].sampling`, in sources.yaml); a source that declares none is unknown."""
    regen = spec.regeneration
    return [
        REGEN_PYTHON, "-m", "dflash_trainer.data.likelihood",
        "--run-root", escape(run_root),
        "--sources", SOURCES_FILE,
        *_model_args(spec, run_root),
        "--dtype", spec.target.dtype.value,
        _thinking(spec.target.thinking),
        "--engine", regen.engine.value,
        "--samples-per-source", str(spec.audit.likelihood.samples_per_source),
        "--default-k", str(spec.audit.likelihood.top_k),
        "--max-seq-len", str(spec.tokenization.max_seq_len),
        "--max-new-tokens", str(regen.max_new_tokens),
        "--out", f"{escape(run_root).rstrip('/')}/{SAMPLE_SCORES}",
        "--tensor-parallel-size", str(regen.tensor_parallel),
        *_engine_args(spec),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def _generation_limit(spec: DFlashRunSpec) -> list[str]:
    """The limit the target generated under (imported completions have none we know of)."""
    if not spec.regeneration.enabled:
        return []
    return ["--max-new-tokens", str(spec.regeneration.max_new_tokens)]


def _canary_input(gate: Gate, run_root: str) -> list[str]:
    """The canary gate reads the canary's answers and reports under audit/canary."""
    if gate != Gate.CANARY:
        return []
    root = escape(run_root).rstrip("/")
    return [f"{root}/{CANARY_FOLDER}/regen", "--out", f"{root}/audit/{Gate.CANARY.value}"]


def scores_folder(spec: DFlashRunSpec) -> str | None:
    """Where a run's likelihood scores are, relative to its root: the canary's when it has
    one, the score stage's for imported completions, else none (the gates skip the check;
    training still monitors)."""
    regen = spec.regeneration
    if regen.enabled:
        return CANARY_SCORES if regen.canary.samples_per_source > 0 else None
    return SAMPLE_SCORES if spec.audit.likelihood.samples_per_source > 0 else None


def _scores(spec: DFlashRunSpec, gate: Gate, run_root: str) -> list[str]:
    folder = CANARY_SCORES if gate == Gate.CANARY else scores_folder(spec)
    if folder is None or gate == Gate.PROMPTS:
        return []
    return ["--scores", f"{escape(run_root).rstrip('/')}/{folder}"]


def build_audit_args(spec: DFlashRunSpec, gate: Gate, run_root: str) -> list[str]:
    """`python -m dflash_trainer.data.audit --gate <gate>`: exit 0 pass, 3 fail."""
    return [
        PYTHON, "-m", "dflash_trainer.data.audit",
        *_canary_input(gate, run_root),
        "--gate", gate.trainer_gate,
        "--run-root", escape(run_root),
        "--thresholds", THRESHOLDS_FILE,
        *_model_args(spec, run_root),
        "--block-size", str(spec.drafter.block_size),
        "--max-seq-len", str(spec.tokenization.max_seq_len),
        *(_generation_limit(spec) if gate in (Gate.COMPLETIONS, Gate.CANARY) else []),
        *([] if spec.target.thinking else ["--no-thinking"]),
        *_scores(spec, gate, run_root),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def build_tokenize_args(spec: DFlashRunSpec, run_root: str) -> list[str]:
    """`python -m dflash_trainer.data.tokenize`: completions -> input_ids, loss_mask, seq_len."""
    return [
        PYTHON, "-m", "dflash_trainer.data.tokenize",
        "--run-root", escape(run_root),
        *_model_args(spec, run_root),
        _thinking(spec.target.thinking),
        "--max-seq-len", str(spec.tokenization.max_seq_len),
        "--truncated-answers", spec.tokenization.truncated_answers.value.lower(),
        "--max-template-mismatch-rate", str(spec.tokenization.max_template_mismatch_rate),
        *_generation_limit(spec),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def build_train_args(run_root: str) -> list[str]:
    """torchrun (its settings come from the PET_* env the PyTorchJob sets) over the trainer."""
    return [
        PYTHON, "-m", "torch.distributed.run",
        "--module", "dflash_trainer.train",
        "--config", TRAIN_FILE,
        "--run-root", escape(run_root),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def build_evaluate_args(run_root: str) -> list[str]:
    """`python -m dflash_trainer.eval --config eval.yaml`: acceptance length."""
    return [
        PYTHON, "-m", "dflash_trainer.eval",
        "--config", EVAL_FILE,
        "--run-root", escape(run_root),
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip


def build_cleanup_args(run_root: str, policy: str) -> list[str]:
    """`python -m dflash_trainer.cleanup`: Delete removes the run's whole S3 root (on
    deletion); DeleteIntermediate removes regen/, tokenized/ and old checkpoints (after
    success)."""
    return [
        PYTHON, "-m", "dflash_trainer.cleanup",
        "--run-root", escape(run_root),
        "--policy", policy,
        "--termination-log", TERMINATION_LOG,
    ]  # fmt: skip
