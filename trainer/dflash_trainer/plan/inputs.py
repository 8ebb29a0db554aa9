"""A training manifest (train.yaml, or a DFlashRun) -> the memory plan's target, drafter and
rank setup. Target shapes come from `--target-config`, the inline `target.config`, a local
model folder's `config.json`, or the built-in table of known targets; never a download.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_memplan.estimate import REDUCE_DTYPE_BYTES, RankSetup, default_loss_chunk_tokens
from dflash_memplan.fixes import Knob
from dflash_memplan.known import known_target_names, known_target_shape
from dflash_memplan.shapes import (
    DFlash2Shape,
    DrafterShape,
    ShapeError,
    TargetShape,
    build_drafter_shape,
    target_shape_from_config,
)

from dflash_trainer.train.config import TrainConfig

# The train.yaml key of each knob the fixes may change.
TRAIN_FIELDS: dict[Knob, str] = {
    "batch_size": "data.batch_size",
    "anchors_per_sequence": "objective.anchors_per_sequence",
    "activation_checkpointing": "drafter.activation_checkpointing",
    "loss_chunk_tokens": "objective.loss_chunk_tokens",
    "strategy": "distributed.strategy",
    "max_seq_len": "data.max_seq_len",
    "world_size": "world size (nodes x GPUs per node)",
    "monitor_every_steps": "likelihood.every_steps",
}
_TARGET_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


class UnknownTargetError(ValueError):
    """No shapes for the target: the message says how to give them."""


@dataclass(frozen=True)
class PlanInputs:
    target: TargetShape
    drafter: DrafterShape
    setup: RankSetup


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ShapeError(f"--target-config {path} cannot be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ShapeError(f"--target-config {path} must hold a JSON object")
    return data


def resolve_target_shape(cfg: TrainConfig, target_config: Path | None) -> TargetShape:
    """The first of: --target-config, target.config, <target.path>/config.json, the table."""
    if target_config is not None:
        return target_shape_from_config(read_json(target_config), str(target_config))
    if cfg.target.config is not None:
        return target_shape_from_config(cfg.target.config, "target.config")
    path = cfg.target.path or ""
    local = Path(path) / "config.json"
    if not path.startswith("s3://") and local.is_file():
        return target_shape_from_config(read_json(local), str(local))
    known = known_target_shape(path)
    if known is None:
        raise UnknownTargetError(
            f"target.path={path} is not a local model folder nor a known target "
            f"({known_target_names()}): pass --target-config <its config.json>; "
            "without it the memory check is skipped"
        )
    return known


def build_plan_inputs(
    cfg: TrainConfig,
    target: TargetShape,
    world_size: int,
    device: str = "cuda",
    expandable_segments: bool = True,
) -> PlanInputs:
    section = cfg.drafter
    drafter = build_drafter_shape(
        target,
        num_layers=section.num_layers,
        block_size=section.block_size,
        target_layer_ids=section.target_layer_ids,
        intermediate_size=section.intermediate_size,
        num_attention_heads=section.num_attention_heads,
        num_key_value_heads=section.num_key_value_heads,
        head_dim=section.head_dim,
        dflash2=(
            None
            if section.dflash2 is None
            else DFlash2Shape(
                conv_kernel_size=section.dflash2.conv_kernel_size,
                conv_group_size=section.dflash2.conv_group_size,
                selector_rank=section.dflash2.selector_rank,
                selector_top_k=section.dflash2.selector_top_k,
            )
        ),
    )
    dtype = cfg.target.dtype
    if dtype == "auto":  # model/target.py: bf16 on GPU, float32 on CPU
        dtype = "bfloat16" if device == "cuda" else "float32"
    setup = RankSetup(
        batch_size=cfg.data.batch_size,
        max_seq_len=cfg.data.max_seq_len,
        anchors_per_sequence=cfg.objective.anchors_per_sequence,
        loss_chunk_tokens=(
            cfg.objective.loss_chunk_tokens or default_loss_chunk_tokens(target.vocab_size)
        ),
        grad_accum=cfg.optim.grad_accum,
        world_size=world_size,
        strategy=cfg.distributed.strategy,
        device="cuda" if device == "cuda" else "cpu",
        target_bytes=_TARGET_BYTES[dtype],
        activation_checkpointing=section.activation_checkpointing,
        # FSDP2 reduces in distributed.reduce_dtype on GPU; on CPU in the float32 gradients.
        reduce_bytes=REDUCE_DTYPE_BYTES[cfg.distributed.reduce_dtype] if device == "cuda" else 4,
        expandable_segments=expandable_segments,
        monitor_every_steps=cfg.likelihood.every_steps,
    )
    return PlanInputs(target, drafter, setup)


def current_values(setup: RankSetup) -> dict[Knob, object]:
    return {
        "batch_size": setup.batch_size,
        "anchors_per_sequence": setup.anchors_per_sequence,
        "activation_checkpointing": setup.activation_checkpointing,
        "loss_chunk_tokens": setup.loss_chunk_tokens,
        "strategy": setup.strategy,
        "max_seq_len": setup.max_seq_len,
        "world_size": setup.world_size,
        "monitor_every_steps": setup.monitor_every_steps,
    }
