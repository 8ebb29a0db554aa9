"""The `<run>-config` ConfigMap: the files stage pods read from /etc/dflash (sources.yaml,
thresholds.yaml, train.yaml, eval.yaml, chat_template.jinja), rendered from the spec, with
a hash so the operator rewrites it only when the spec changed (docs/data-contracts.md s.7).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from dflash_operator.api.constants import Stage
from dflash_operator.api.naming import child_name
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.spec_data import SourceFormat
from dflash_operator.api.spec_model import DFlash2Spec, DrafterArchitecture
from dflash_operator.api.spec_training import Strategy
from dflash_operator.children.commands import (
    CHAT_TEMPLATE_FILE,
    REGEN_TOP_K,
    is_hub_model,
    model_uri,
    to_local,
)
from dflash_operator.children.meta import ANNOTATION_CONFIG_HASH, RunRef, build_metadata

# The trainer patches status at most this often (data-contracts section 6).
PROGRESS_PATCH_SECONDS = 30
# The evaluation needs at least the bonus token and one drafted token per prompt.
MIN_EVAL_NEW_TOKENS = 2
# Held-out share of the tokenized samples when evaluation prompts come from the training
# data: maxPrompts with a margin for samples whose prompt is unusable (too long, nothing
# supervised), never more than a quarter of the data (tiny runs still train), and a small
# share before the sample count is known (only stages before training render it then).
HOLDOUT_MARGIN = 1.5
MAX_HOLDOUT_FRACTION = 0.25
DEFAULT_HOLDOUT_FRACTION = 0.01
_STRATEGIES = {Strategy.DDP: "ddp", Strategy.FSDP: "fsdp2"}


def build_sources_file(spec: DFlashRunSpec) -> dict[str, Any]:
    return {"sources": [source.to_api() for source in spec.data.sources]}


def build_thresholds_file(spec: DFlashRunSpec) -> dict[str, Any]:
    """The gates' thresholds, flat, as the trainer's `Thresholds` reads them."""
    return spec.audit.thresholds_file(expect_thinking=spec.target.thinking)


def _layer_types(spec: DFlashRunSpec) -> list[str] | None:
    window = spec.drafter.sliding_window
    if window is None:
        return None
    layers = spec.drafter.num_layers
    return ["sliding_attention"] * window.layers + ["full_attention"] * (layers - window.layers)


def build_target_section(spec: DFlashRunSpec, run_root: str) -> dict[str, Any]:
    """train.yaml / eval.yaml `target`: the model, its dtype and the revision the data stages
    used, so training and evaluation load the very same weights: the run's copy of a Hub target
    (pinned by the model stage), else the spec's folder at its `revision`."""
    section: dict[str, Any] = {
        "path": model_uri(spec, run_root),
        "dtype": spec.target.dtype.value,
    }
    if spec.target.revision and not is_hub_model(spec.target.model):
        section["revision"] = spec.target.revision
    return section


def build_holdout_fraction(spec: DFlashRunSpec, samples: int | None) -> float:
    """Share of the training data kept out for evaluation: train.yaml `data.holdout_fraction`
    and eval.yaml `prompts.holdout_fraction`, which must agree (the same hash of the sample
    id picks the same rows). 0 without evaluation, or with its own `prompts`."""
    evaluation = spec.evaluation
    if not evaluation.enabled or evaluation.prompts is not None:
        return 0.0
    if not samples:
        return DEFAULT_HOLDOUT_FRACTION
    share = min(MAX_HOLDOUT_FRACTION, evaluation.max_prompts * HOLDOUT_MARGIN / samples)
    return float(f"{share:.4g}")


def build_train_file(
    spec: DFlashRunSpec, run_root: str, samples: int | None = None
) -> dict[str, Any]:
    """The trainer's config (`dflash_trainer/train/config.py`, docs/trainer-config.md);
    `samples`: the tokenized samples (status), which size the evaluation's hold-out."""
    training = spec.training
    drafter: dict[str, Any] = {
        "num_layers": spec.drafter.num_layers,
        "block_size": spec.drafter.block_size,
    }
    if spec.drafter.target_layer_ids is not None:
        drafter["target_layer_ids"] = list(spec.drafter.target_layer_ids)
    if spec.drafter.mask_token_id is not None:
        drafter["mask_token_id"] = spec.drafter.mask_token_id
    if training.activation_checkpointing:
        drafter["activation_checkpointing"] = True
    if spec.drafter.architecture is DrafterArchitecture.DFLASH2:
        knobs = spec.drafter.dflash2 or DFlash2Spec()
        drafter["dflash2"] = knobs.model_dump(mode="json")  # snake_case: the trainer's keys
    layer_types = _layer_types(spec)
    if layer_types is not None and spec.drafter.sliding_window is not None:
        drafter["layer_types"] = layer_types
        drafter["sliding_window"] = spec.drafter.sliding_window.size
    return {
        "run_root": run_root,
        "seed": training.seed,
        "target": build_target_section(spec, run_root),
        "drafter": drafter,
        "data": {
            "max_seq_len": spec.tokenization.max_seq_len,
            "batch_size": training.batch_size,
            "holdout_fraction": build_holdout_fraction(spec, samples),
        },
        "objective": {
            "anchors_per_sequence": training.anchors_per_sequence,
            # Unset: the trainer takes gamma from the block size (train/anchors.py).
            **(
                {"gamma": training.loss_decay_gamma}
                if training.loss_decay_gamma is not None
                else {}
            ),
        },
        "optim": {
            "lr": training.learning_rate,
            "warmup_ratio": training.warmup_ratio,
            "grad_clip": training.grad_clip,
            "epochs": training.epochs,
            "grad_accum": training.gradient_accumulation_steps,
            **({"max_steps": training.max_steps} if training.max_steps is not None else {}),
        },
        "distributed": {"strategy": _STRATEGIES[training.strategy]},
        "checkpoint": {
            "every_steps": training.checkpoint_every_steps,
            "keep_last": training.keep_checkpoints,
            "resume": True,
        },
        "logging": {"progress_patch_seconds": PROGRESS_PATCH_SECONDS},
        "likelihood": build_likelihood_section(spec),
    }


def build_likelihood_section(spec: DFlashRunSpec) -> dict[str, Any]:
    """The training likelihood monitor (`dflash_trainer/train/config.py` LikelihoodSection):
    spec.audit.likelihood's settings, judged against the sampling the data was generated with
    (spec.regeneration; for imported completions, what the user declared there)."""
    likelihood = spec.audit.likelihood
    regen = spec.regeneration
    return {
        "every_steps": likelihood.monitor_every_steps,
        "temperature": regen.temperature,
        "top_p": regen.top_p,
        "top_k": REGEN_TOP_K,
        "default_k": likelihood.top_k,
        "max_off_distribution_rate": likelihood.max_off_distribution_rate,
        "min_source_rows": spec.audit.min_source_samples,
        "engine_tolerance": likelihood.engine_tolerance,
        "nll_tolerance": likelihood.nll_tolerance,
        "row_outside_share": likelihood.row_outside_share,
        "row_z": likelihood.row_z,
        "sources": build_declared_sampling(spec),
    }


def build_declared_sampling(spec: DFlashRunSpec) -> dict[str, Any]:
    """Imported sources (format regenerated) with the sampling each declares (None: unknown):
    the monitor judges their rows by it, not by spec.regeneration's."""
    return {
        source.name: (
            {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "min_p": s.min_p}
            if (s := source.sampling) is not None
            else None
        )
        for source in spec.data.sources
        if source.format == SourceFormat.REGENERATED
    }


def build_eval_file(
    spec: DFlashRunSpec, run_root: str, on_gpus: bool, samples: int | None = None
) -> dict[str, Any]:
    """The evaluation's config (`dflash_trainer/eval/config.py`) from every field of
    spec.evaluation: prompts (its own source, else held out of the training data), maxPrompts,
    maxNewTokens, temperature; image and nodePool shape the pod instead."""
    evaluation = spec.evaluation
    prompts: dict[str, Any] = {"num_prompts": evaluation.max_prompts}
    if evaluation.prompts is not None:
        source: dict[str, Any] = {
            "uri": to_local(evaluation.prompts.uri),
            "format": evaluation.prompts.format.value,
            "enable_thinking": spec.target.thinking,
        }
        if spec.target.chat_template:
            source["chat_template"] = CHAT_TEMPLATE_FILE
        prompts["source"] = source
    else:
        prompts["holdout_fraction"] = build_holdout_fraction(spec, samples)
    return {
        "run_root": run_root,
        "target": build_target_section(spec, run_root),
        "drafter_uri": f"{run_root}/final",
        "prompts": prompts,
        "max_new_tokens": max(evaluation.max_new_tokens, MIN_EVAL_NEW_TOKENS),
        "temperature": evaluation.temperature,
        # vLLM on GPU pools; the built-in speculative loop on CPU (tests, demo).
        "engine": "vllm" if on_gpus else "builtin",
    }


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def build_config_data(
    spec: DFlashRunSpec, run_root: str, eval_on_gpus: bool = False, samples: int | None = None
) -> dict[str, str]:
    """File name -> content, exactly as mounted at /etc/dflash; `samples`: tokenized samples
    so far (None before tokenization), for the evaluation's hold-out."""
    data = {
        "sources.yaml": _dump(build_sources_file(spec)),
        "thresholds.yaml": _dump(build_thresholds_file(spec)),
        "train.yaml": _dump(build_train_file(spec, run_root, samples)),
        "eval.yaml": _dump(build_eval_file(spec, run_root, eval_on_gpus, samples)),
    }
    if spec.target.chat_template:
        data["chat_template.jinja"] = spec.target.chat_template
    return data


def config_hash(data: dict[str, str]) -> str:
    """Short, stable hash of the rendered files (annotation on the ConfigMap)."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def build_config_map(
    run: RunRef,
    spec: DFlashRunSpec,
    run_root: str,
    eval_on_gpus: bool = False,
    samples: int | None = None,
) -> dict[str, Any]:
    data = build_config_data(spec, run_root, eval_on_gpus, samples)
    name = child_name(run.name, Stage.CONFIG)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": build_metadata(
            run, name, Stage.CONFIG, annotations={ANNOTATION_CONFIG_HASH: config_hash(data)}
        ),
        "data": data,
    }
