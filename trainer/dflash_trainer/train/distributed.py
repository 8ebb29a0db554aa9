"""torch.distributed from the torchrun / PyTorchJob environment, and the drafter's wrapper.

`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT` come from torchrun (which
reads the `PET_*` variables a PyTorchJob or a TrainJob's torch runtime sets) or from PyTorchJob
directly (one process per pod).
NCCL on GPU, gloo on CPU; world size 1 needs no process group at all. The drafter is
wrapped in DDP or FSDP2; the frozen target is never wrapped (each rank holds a copy).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def init_distributed(timeout_minutes: int) -> DistEnv:
    """Join the process group named by the environment (no-op for a single process)."""
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            timeout=timedelta(minutes=timeout_minutes),
            device_id=device if device.type == "cuda" else None,
        )
    return DistEnv(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


def shutdown_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# The dtype FSDP2 reduce-scatters gradients in (and accumulates them in, unsharded, between the
# micro-batches of a step): float32 unless bf16 is measured equal (docs/trainer.md).
REDUCE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def wrap_drafter(
    drafter: nn.Module, env: DistEnv, strategy: str, reduce_dtype: str = "float32"
) -> nn.Module:
    """DDP or FSDP2 around the drafter; the bare module for a single process, unless FSDP2 is
    asked for in a process group of one rank (the GPU smoke runs production's wrapper so)."""
    one_rank_fsdp = strategy == "fsdp2" and dist.is_initialized()
    if not env.is_distributed and not one_rank_fsdp:
        return drafter
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [env.local_rank] if env.device.type == "cuda" else None
        return DistributedDataParallel(drafter, device_ids=device_ids)
    if strategy == "fsdp2":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = None
        if env.device.type == "cuda":
            # bf16 compute and all-gathers, float32 master weights; gradients are reduced (and
            # accumulated across micro-batches) in `reduce_dtype`.
            policy = MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=REDUCE_DTYPES[reduce_dtype]
            )
        kwargs: dict[str, Any] = {"mp_policy": policy} if policy else {}
        for layer in drafter.layers:  # type: ignore[union-attr]
            fully_shard(layer, **kwargs)
        selector = getattr(drafter, "candidate_selector", None)
        if selector is not None:
            # DFlash2's codebooks ([V, r] each) are a unit of their own: sharded at rest, gathered
            # only for the selector's call in the loss (outside the drafter's forward).
            fully_shard(selector, **kwargs)
        fully_shard(drafter, **kwargs)
        return drafter
    raise ValueError(f"distributed.strategy={strategy!r} is unknown; accepted: ddp, fsdp2")


def unwrap(model: nn.Module) -> nn.Module:
    inner = getattr(model, "module", model)
    return inner if isinstance(inner, nn.Module) else model


def all_reduce_sum(tensor: torch.Tensor, env: DistEnv) -> torch.Tensor:
    """Sum over ranks, in place; returns the tensor (identity for one process)."""
    if env.is_distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_object(value: Any, env: DistEnv) -> Any:
    """Rank 0's `value` on every rank."""
    if not env.is_distributed:
        return value
    holder = [value if env.is_main else None]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather_objects(value: Any, env: DistEnv) -> list[Any]:
    """Every rank's `value`, in rank order (on every rank)."""
    if not env.is_distributed:
        return [value]
    out: list[Any] = [None] * env.world_size
    dist.all_gather_object(out, value)
    return out


def barrier(env: DistEnv) -> None:
    if env.is_distributed:
        dist.barrier()
