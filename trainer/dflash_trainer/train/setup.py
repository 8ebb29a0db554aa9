"""Build what a training run needs from its config: target, drafter, optimizer, schedule, rows.

Pure construction, no training; `train/trainer.py` runs the loop. The drafter is built from
a fixed seed on every rank (so ranks agree before DDP's broadcast), and so are the
self-distillation rows of debug runs.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from dflash_trainer.eval.greedy import build_self_distill_samples
from dflash_trainer.model.config import DFlash2Settings, DrafterConfig, build_drafter_config
from dflash_trainer.model.dflash2_drafter import DFlash2Drafter
from dflash_trainer.model.drafter import DFlashDrafter
from dflash_trainer.model.target import TargetParts, load_target
from dflash_trainer.train.anchors import default_gamma
from dflash_trainer.train.batches import (
    DataError,
    TokenRows,
    build_rows,
    read_tokenized,
    split_holdout,
)
from dflash_trainer.train.config import (
    DataSection,
    DrafterSection,
    OptimSection,
    TargetSection,
    TrainConfig,
)
from dflash_trainer.train.loss import default_loss_chunk_tokens
from dflash_trainer.train.step import ObjectiveSettings

log = logging.getLogger(__name__)


def build_target(section: TargetSection, device: torch.device) -> TargetParts:
    return load_target(
        path=section.path,
        config=section.config,
        seed=section.init_seed,
        dtype=section.dtype,
        device=device,
        cache_dir=Path(section.cache_dir),
        revision=section.revision,
    )


def build_drafter_config_for(section: DrafterSection, target: TargetParts) -> DrafterConfig:
    return build_drafter_config(
        target.config,
        num_layers=section.num_layers,
        block_size=section.block_size,
        target_layer_ids=section.target_layer_ids,
        mask_token_id=section.mask_token_id,
        intermediate_size=section.intermediate_size,
        num_attention_heads=section.num_attention_heads,
        num_key_value_heads=section.num_key_value_heads,
        head_dim=section.head_dim,
        layer_types=list(section.layer_types) if section.layer_types else None,
        sliding_window=section.sliding_window,
        dflash2=(
            DFlash2Settings(**section.dflash2.model_dump()) if section.dflash2 is not None else None
        ),
    )


def build_drafter(
    cfg: DrafterConfig, seed: int, device: torch.device, checkpoint_layers: bool = False
) -> DFlashDrafter:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        architecture = DFlashDrafter if cfg.dflash2 is None else DFlash2Drafter
        drafter = architecture(cfg, checkpoint_layers=checkpoint_layers)
    return drafter.to(device)


def build_objective_settings(cfg: TrainConfig, drafter_cfg: DrafterConfig) -> ObjectiveSettings:
    return ObjectiveSettings(
        block_size=drafter_cfg.block_size,
        mask_token_id=drafter_cfg.mask_token_id,
        gamma=cfg.objective.gamma or default_gamma(drafter_cfg.block_size),
        anchors_per_sequence=cfg.objective.anchors_per_sequence,
        max_seq_len=cfg.data.max_seq_len,
        loss_chunk_tokens=(
            cfg.objective.loss_chunk_tokens or default_loss_chunk_tokens(drafter_cfg.vocab_size)
        ),
        backend=cfg.drafter.attention_backend,
        chunk_queries=cfg.drafter.chunk_queries,
        selector_loss_weight=(
            None if drafter_cfg.dflash2 is None else drafter_cfg.dflash2.selector_loss_weight
        ),
        seed=cfg.seed,
    )


def build_rows_for(
    data: DataSection, run_root: str, target: TargetParts, mask_token_id: int
) -> tuple[TokenRows, TokenRows]:
    """(training rows, held-out rows) from tokenized shards or self-distillation."""
    if data.self_distill is not None:
        sd = data.self_distill
        input_ids, loss_mask = build_self_distill_samples(
            target.model,
            samples=sd.samples,
            prompt_tokens=sd.prompt_tokens,
            answer_tokens=sd.answer_tokens,
            vocab_size=int(target.config.vocab_size),
            seed=sd.seed,
            avoid=mask_token_id,
        )
        rows = build_rows(input_ids, loss_mask, prefix=f"self-distill-{sd.seed}")
    else:
        rows = read_tokenized(data.tokenized(run_root))
    train_rows, held = split_holdout(rows, data.holdout_fraction)
    if len(train_rows) == 0:
        raise DataError(f"no training rows left after holding out {data.holdout_fraction:.0%}")
    return train_rows, held


def build_optimizer(
    model: torch.nn.Module, optim: OptimSection, device: torch.device, sharded: bool
) -> torch.optim.Optimizer:
    """AdamW; the fused CUDA kernel for plain/DDP parameters, the default (foreach) for
    FSDP2's sharded DTensor parameters."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        params,
        lr=optim.lr,
        betas=optim.betas,
        eps=optim.eps,
        weight_decay=optim.weight_decay,
        fused=(device.type == "cuda" and not sharded) or None,
    )


@dataclass(frozen=True)
class LrFactor:
    """Linear warmup to 1, then cosine down to `min_ratio` at `total_steps`."""

    total_steps: int
    warmup_steps: int
    min_ratio: float

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        return self.min_ratio + (1.0 - self.min_ratio) * cosine


def build_scheduler(
    optimizer: torch.optim.Optimizer, optim: OptimSection, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = math.ceil(optim.warmup_ratio * total_steps)
    factor = LrFactor(total_steps, warmup, optim.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def count_total_steps(cfg: TrainConfig, num_rows: int, global_batch: int) -> int:
    steps_per_epoch = num_rows // global_batch
    if steps_per_epoch == 0:
        raise DataError(
            f"the training data has {num_rows} rows, fewer than one global batch "
            f"({global_batch} = data.batch_size x world size x optim.grad_accum)"
        )
    return cfg.optim.max_steps or cfg.optim.epochs * steps_per_epoch
