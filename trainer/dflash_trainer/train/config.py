"""The trainer's configuration (`train.yaml`): pydantic models, validated at load, no torch.

Unknown keys are rejected; `a.b=c` command-line overrides are applied before validation.
Every key is documented in `docs/trainer-config.md`; the evaluation config reuses the
target and data sections (`dflash_trainer/eval/config.py`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dflash_trainer.storage import join_uri


class ConfigError(ValueError):
    """A config file or override that cannot be used; one line naming the key and the value."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TargetSection(Section):
    path: str | None = None
    # Hub revision (branch, tag or commit) of a Hub-id `path`: the one the data stages used.
    revision: str | None = None
    config: dict[str, Any] | None = None
    init_seed: int = 0
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    cache_dir: str = str(Path(tempfile.gettempdir()) / "dflash-cache")

    @model_validator(mode="after")
    def _one_source(self) -> TargetSection:
        if (self.path is None) == (self.config is None):
            raise ValueError("set exactly one of target.path (HF folder) and target.config")
        return self

    @property
    def name(self) -> str:
        if self.path:
            return self.path
        return f"random {(self.config or {}).get('model_type', '?')} (seed {self.init_seed})"


class DFlash2Section(Section):
    """DFlash2's knobs (`model/config.py::DFlash2Settings`, speculators 0.9.0's defaults);
    setting the section makes the drafter DFlash2."""

    conv_kernel_size: Annotated[int, Field(ge=1)] = 2
    conv_group_size: Annotated[int, Field(ge=1)] = 16
    selector_rank: Annotated[int, Field(ge=1)] = 256
    selector_top_k: Annotated[int, Field(ge=1)] = 16
    selector_loss_weight: Annotated[float, Field(ge=0)] = 1.0


class DrafterSection(Section):
    num_layers: Annotated[int, Field(ge=1)] = 5
    block_size: Annotated[int, Field(ge=2)] = 16
    target_layer_ids: list[int] | None = None
    mask_token_id: Annotated[int | None, Field(ge=0)] = None
    intermediate_size: Annotated[int | None, Field(ge=1)] = None
    num_attention_heads: Annotated[int | None, Field(ge=1)] = None
    num_key_value_heads: Annotated[int | None, Field(ge=1)] = None
    head_dim: Annotated[int | None, Field(ge=1)] = None
    layer_types: list[Literal["full_attention", "sliding_attention"]] | None = None
    sliding_window: Annotated[int | None, Field(ge=2)] = None
    attention_backend: Literal["auto", "sdpa", "flex", "dense"] = "auto"
    chunk_queries: Annotated[int, Field(ge=1)] = 256
    # Keep only each draft layer's input for backward and recompute the layer (docs/memory-plan.md).
    activation_checkpointing: bool = False
    init_seed: int = 0
    # None trains plain DFlash; a section (even `dflash2: {}`) trains DFlash2.
    dflash2: DFlash2Section | None = None


class SelfDistillSection(Section):
    """Debug data: the target's own greedy continuations of random prompts, made in memory."""

    samples: Annotated[int, Field(ge=1)] = 256
    prompt_tokens: Annotated[int, Field(ge=1)] = 16
    answer_tokens: Annotated[int, Field(ge=2)] = 48
    seed: int = 0


class DataSection(Section):
    tokenized_uri: str | None = None
    self_distill: SelfDistillSection | None = None
    max_seq_len: Annotated[int, Field(ge=8)] = 3072
    batch_size: Annotated[int, Field(ge=1)] = 4
    holdout_fraction: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    shuffle: bool = True

    def tokenized(self, run_root: str) -> str:
        return self.tokenized_uri or join_uri(run_root, "tokenized")


class ObjectiveSection(Section):
    anchors_per_sequence: Annotated[int, Field(ge=1)] = 512
    # None: from the block size (train/anchors.py `default_gamma`: 7 for 16, 5 for 10, 4 for 8).
    gamma: Annotated[float | None, Field(gt=0.0)] = None
    # None: from the vocabulary (train/loss.py `default_loss_chunk_tokens`: ~2^28 logits).
    loss_chunk_tokens: Annotated[int | None, Field(ge=1)] = None


class OptimSection(Section):
    lr: Annotated[float, Field(gt=0.0)] = 6e-4
    min_lr_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    eps: Annotated[float, Field(gt=0.0)] = 1e-8
    warmup_ratio: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.04
    grad_clip: Annotated[float, Field(ge=0.0)] = 1.0
    epochs: Annotated[int, Field(ge=1)] = 6
    max_steps: Annotated[int | None, Field(ge=1)] = None
    grad_accum: Annotated[int, Field(ge=1)] = 1


class DistributedSection(Section):
    strategy: Literal["ddp", "fsdp2"] = "ddp"
    # FSDP2 on GPU: the dtype gradients are reduce-scattered and accumulated in (unsharded,
    # between the micro-batches of a step). float32 until bf16 is measured equal.
    reduce_dtype: Literal["float32", "bfloat16"] = "float32"
    timeout_minutes: Annotated[int, Field(ge=1)] = 30


class CheckpointSection(Section):
    uri: str | None = None
    every_steps: Annotated[int, Field(ge=1)] = 1000
    keep_last: Annotated[int, Field(ge=1)] = 3
    resume: bool = True


class ExportSection(Section):
    uri: str | None = None
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"


class LoggingSection(Section):
    every_steps: Annotated[int, Field(ge=1)] = 10
    metrics_file: str | None = None
    progress_patch_seconds: Annotated[float, Field(ge=0.0)] = 30.0


class DeclaredSampling(Section):
    """How one imported source was generated (spec.data.sources[].sampling)."""

    temperature: Annotated[float, Field(ge=0.0)]
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Field(ge=0)] = 0
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0


class LikelihoodSection(Section):
    """The target-likelihood monitor (docs/audit-gates.md, section 8.3): on every
    `every_steps`-th step the supervised tokens of the step's batch are scored under the target
    (its forward runs anyway) and judged per source; a source whose off-distribution rate
    crosses `max_off_distribution_rate` beyond sampling noise stops training (`enforce`).
    The sampling fields are the regeneration's (spec.regeneration), the rest spec.audit's;
    `sources` names the imported sources (format regenerated) with the sampling each declares,
    null where unknown: such a source is not scored (its rules are reported as skipped)."""

    every_steps: Annotated[int, Field(ge=0)] = 0  # 0: off (the operator sets it, default 10)
    temperature: Annotated[float, Field(ge=0.0)] = 0.6
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 0.95
    top_k: Annotated[int, Field(ge=0)] = 20
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    penalized: bool = False
    default_k: Annotated[int, Field(ge=1)] = 20
    max_off_distribution_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.05
    min_source_rows: Annotated[int, Field(ge=1)] = 50
    engine_tolerance: Annotated[float, Field(ge=0.0)] = 0.25  # rows.DEFAULT_ENGINE_TOLERANCE
    nll_tolerance: Annotated[float, Field(ge=0.0)] = 0.01
    row_outside_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.005
    row_z: Annotated[float, Field(gt=0.0)] = 4.0
    enforce: bool = True
    report_uri: str | None = None  # default <run_root>/audit/training
    sources: dict[str, DeclaredSampling | None] = {}


class TrainConfig(Section):
    run_root: str
    seed: int = 0
    target: TargetSection
    drafter: DrafterSection = DrafterSection()
    data: DataSection = DataSection()
    objective: ObjectiveSection = ObjectiveSection()
    optim: OptimSection = OptimSection()
    distributed: DistributedSection = DistributedSection()
    checkpoint: CheckpointSection = CheckpointSection()
    export: ExportSection = ExportSection()
    logging: LoggingSection = LoggingSection()
    likelihood: LikelihoodSection = LikelihoodSection()

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.data.tokenized_uri and self.data.self_distill:
            raise ValueError("set at most one of data.tokenized_uri and data.self_distill")
        return self

    @property
    def checkpoint_uri(self) -> str:
        return self.checkpoint.uri or join_uri(self.run_root, "checkpoints")

    @property
    def export_uri(self) -> str:
        return self.export.uri or join_uri(self.run_root, "final")

    @property
    def likelihood_report_uri(self) -> str:
        return self.likelihood.report_uri or join_uri(self.run_root, "audit", "training")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b=c` overrides (values parsed as YAML: `lr=3e-4`, `betas=[0.9,0.99]`)."""
    out = dict(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} is invalid; accepted: dotted.key=value")
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            node[part] = dict(child) if isinstance(child, dict) else {}
            node = node[part]
        node[parts[-1]] = yaml.safe_load(raw) if raw != "" else None
    return out


def format_validation_error(source: str, exc: ValidationError) -> str:
    """One line per problem: `source: key.path: message (got value)`."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (see docs/trainer-config.md for the accepted keys)"
        got = "" if err["type"] in {"missing", "extra_forbidden"} else f" (got {err['input']!r})"
        lines.append(f"{source}: {loc}: {msg}{got}"[:300])
    return "; ".join(lines)


def load_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping, got {type(raw).__name__}")
    return raw


def resolve_pvc_uris(data: dict[str, Any], keys: list[tuple[str, ...]]) -> dict[str, Any]:
    """`pvc://<claim>/<path>` values at `keys` -> where the operator mounts the claim."""
    from dflash_trainer.data.uris import to_local_uri

    out = dict(data)
    for key in keys:
        node = out
        for part in key[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                break
            node[part] = node = dict(child)
        else:
            value = node.get(key[-1])
            if isinstance(value, str):
                node[key[-1]] = to_local_uri(value)
    return out


TRAIN_URI_KEYS = [
    ("run_root",),
    ("target", "path"),
    ("data", "tokenized_uri"),
    ("checkpoint", "uri"),
    ("export", "uri"),
    ("likelihood", "report_uri"),
]


def load_train_config(
    path: Path, overrides: list[str] | None = None, run_root: str | None = None
) -> TrainConfig:
    data = apply_overrides(load_yaml_mapping(path), overrides or [])
    if run_root:
        data["run_root"] = run_root
    data = resolve_pvc_uris(data, TRAIN_URI_KEYS)
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc)) from None
