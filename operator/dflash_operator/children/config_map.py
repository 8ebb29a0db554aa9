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
from dflash_operator.api.spec_training import Strategy
from dflash_operator.children.commands import to_local
from dflash_operator.children.meta import ANNOTATION_CONFIG_HASH, RunRef, build_metadata

# The trainer patches status at most this often (data-contracts section 6).
PROGRESS_PATCH_SECONDS = 30
# The evaluation needs at least the bonus token and one drafted token per prompt.
MIN_EVAL_NEW_TOKENS = 2
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


def build_train_file(spec: DFlashRunSpec, run_root: str) -> dict[str, Any]:
    """The trainer's config (`dflash_trainer/train/config.py`, docs/trainer-config.md)."""
    training = spec.training
    drafter: dict[str, Any] = {
        "num_layers": spec.drafter.num_layers,
        "block_size": spec.drafter.block_size,
    }
    if spec.drafter.target_layer_ids is not None:
        drafter["target_layer_ids"] = list(spec.drafter.target_layer_ids)
    if spec.drafter.mask_token_id is not None:
        drafter["mask_token_id"] = spec.drafter.mask_token_id
    layer_types = _layer_types(spec)
    if layer_types is not None and spec.drafter.sliding_window is not None:
        drafter["layer_types"] = layer_types
        drafter["sliding_window"] = spec.drafter.sliding_window.size
    return {
        "run_root": run_root,
        "seed": training.seed,
        "target": {"path": to_local(spec.target.model), "dtype": spec.target.dtype.value},
        "drafter": drafter,
        "data": {"max_seq_len": spec.tokenization.max_seq_len, "batch_size": training.batch_size},
        "objective": {
            "anchors_per_sequence": training.anchors_per_sequence,
            "gamma": training.loss_decay_gamma,
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
    }


def build_eval_file(spec: DFlashRunSpec, run_root: str, on_gpus: bool) -> dict[str, Any]:
    """The evaluation's config (`dflash_trainer/eval/config.py`): target, drafter, prompts."""
    evaluation = spec.evaluation
    return {
        "run_root": run_root,
        "target": {"path": to_local(spec.target.model), "dtype": spec.target.dtype.value},
        "drafter_uri": f"{run_root}/final",
        "prompts": {"num_prompts": evaluation.max_prompts},
        "max_new_tokens": max(evaluation.max_new_tokens, MIN_EVAL_NEW_TOKENS),
        # vLLM on GPU pools; the built-in speculative loop on CPU (tests, demo).
        "engine": "vllm" if on_gpus else "builtin",
    }


def _dump(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True)


def build_config_data(
    spec: DFlashRunSpec, run_root: str, eval_on_gpus: bool = False
) -> dict[str, str]:
    """File name -> content, exactly as mounted at /etc/dflash."""
    data = {
        "sources.yaml": _dump(build_sources_file(spec)),
        "thresholds.yaml": _dump(build_thresholds_file(spec)),
        "train.yaml": _dump(build_train_file(spec, run_root)),
        "eval.yaml": _dump(build_eval_file(spec, run_root, eval_on_gpus)),
    }
    if spec.target.chat_template:
        data["chat_template.jinja"] = spec.target.chat_template
    return data


def config_hash(data: dict[str, str]) -> str:
    """Short, stable hash of the rendered files (annotation on the ConfigMap)."""
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def build_config_map(
    run: RunRef, spec: DFlashRunSpec, run_root: str, eval_on_gpus: bool = False
) -> dict[str, Any]:
    data = build_config_data(spec, run_root, eval_on_gpus)
    name = child_name(run.name, Stage.CONFIG)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": build_metadata(
            run, name, Stage.CONFIG, annotations={ANNOTATION_CONFIG_HASH: config_hash(data)}
        ),
        "data": data,
    }
