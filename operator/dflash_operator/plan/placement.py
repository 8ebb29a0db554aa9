"""Which node pool each stage of a run uses, how many GPUs (and processes) each pod gets, and
why a run does not fit its pools (unknown pool, more GPUs than a node has). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflash_operator.api.constants import Reason, Stage
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.pools import NodePool, PoolsConfig

# The spec field that names each stage's pool, and the pools-file default used when unset.
_POOL_FIELDS: dict[Stage, str] = {
    Stage.MODEL: "(operator default: defaults.model, else defaults.tokenization)",
    Stage.CANARY: "spec.regeneration.nodePool",
    Stage.AUDIT_CANARY: "spec.audit.nodePool",
    Stage.REGEN: "spec.regeneration.nodePool",
    Stage.SCORE: "spec.regeneration.nodePool",
    Stage.AUDIT_COMPLETIONS: "spec.audit.nodePool",
    Stage.AUDIT_TOKENS: "spec.audit.nodePool",
    Stage.TOKENIZE: "spec.tokenization.nodePool",
    Stage.TRAIN: "spec.training.nodePool",
    Stage.EVAL: "spec.evaluation.nodePool",
    Stage.CLEANUP: "(operator default)",
    Stage.PRUNE: "(operator default)",
}
# Evaluation serves one target + drafter pair: one GPU is enough for the sizes we train.
EVAL_GPUS = 1


@dataclass(frozen=True)
class Placement:
    """Where one stage's pods go and what accelerators each requests."""

    stage: Stage
    pool_name: str
    pool: NodePool
    # GPUs requested by each pod (0 on a CPU pool).
    gpus: int = 0
    # Training processes per pod (PyTorchJob nprocPerNode).
    processes: int = 1


@dataclass(frozen=True)
class PlacementError:
    """Why a run cannot run on the configured pools; becomes the Failed condition."""

    reason: Reason
    message: str


def requested_pool(spec: DFlashRunSpec, stage: Stage, pools: PoolsConfig) -> str:
    """The pool the run names for `stage`, else the operator's default for it."""
    defaults = pools.defaults
    named: dict[Stage, str | None] = {
        # A download: CPU nodes with egress to the Hub (or its mirror), never a GPU pool.
        Stage.MODEL: defaults.model or defaults.tokenization,
        Stage.CANARY: spec.regeneration.node_pool or defaults.regeneration,
        Stage.AUDIT_CANARY: spec.audit.node_pool or defaults.audit,
        Stage.REGEN: spec.regeneration.node_pool or defaults.regeneration,
        # Scoring loads the target: the pool that can hold it, regeneration's.
        Stage.SCORE: spec.regeneration.node_pool or defaults.regeneration,
        Stage.AUDIT_COMPLETIONS: spec.audit.node_pool or defaults.audit,
        Stage.AUDIT_TOKENS: spec.audit.node_pool or defaults.audit,
        Stage.TOKENIZE: spec.tokenization.node_pool or defaults.tokenization,
        Stage.TRAIN: spec.training.node_pool or defaults.training,
        Stage.EVAL: spec.evaluation.node_pool or defaults.evaluation or defaults.training,
        Stage.CLEANUP: defaults.cleanup or defaults.audit,
        Stage.PRUNE: defaults.cleanup or defaults.audit,
    }
    pool = named.get(stage)
    if pool is None:
        raise ValueError(f"stage {stage.value!r} runs no pods")
    return pool


def _too_many(field: str, value: int, pool_name: str, pool: NodePool, why: str) -> PlacementError:
    return PlacementError(
        Reason.INVALID_SPEC,
        Reason.INVALID_SPEC.message(
            field=field,
            value=value,
            accepted=f"{why}; node pool {pool_name} has {pool.gpus_per_node} GPUs per node",
        ),
    )


def _divisors(count: int) -> str:
    options = [str(d) for d in range(1, count + 1) if count % d == 0]
    return ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]


def place_stage(
    spec: DFlashRunSpec, stage: Stage, pools: PoolsConfig
) -> Placement | PlacementError:
    """The placement of `stage`, or the reason the run does not fit the pool."""
    field = _POOL_FIELDS[stage]
    pool_name = requested_pool(spec, stage, pools)
    pool = pools.node_pools.get(pool_name)
    if pool is None:
        return PlacementError(
            Reason.UNKNOWN_NODE_POOL,
            Reason.UNKNOWN_NODE_POOL.message(field=field, pool=pool_name, pools=pools.names()),
        )
    if stage in (Stage.REGEN, Stage.CANARY, Stage.SCORE) and pool.has_gpus:
        tp = spec.regeneration.tensor_parallel
        if tp > pool.gpus_per_node:
            return _too_many(
                "spec.regeneration.tensorParallel", tp, pool_name, pool,
                f"at most {pool.gpus_per_node} GPUs per vLLM engine",
            )  # fmt: skip
        if pool.gpus_per_node % tp:
            return _too_many(
                "spec.regeneration.tensorParallel", tp, pool_name, pool,
                f"it must divide the GPUs of a node ({_divisors(pool.gpus_per_node)})",
            )  # fmt: skip
        return Placement(stage, pool_name, pool, gpus=tp)
    if stage == Stage.TRAIN:
        wanted = spec.training.gpus_per_node
        if not pool.has_gpus:
            return Placement(stage, pool_name, pool, gpus=0, processes=wanted or 1)
        if wanted is not None and wanted > pool.gpus_per_node:
            return _too_many(
                "spec.training.gpusPerNode", wanted, pool_name, pool,
                f"at most {pool.gpus_per_node}",
            )  # fmt: skip
        gpus = wanted or pool.gpus_per_node
        return Placement(stage, pool_name, pool, gpus=gpus, processes=gpus)
    if stage == Stage.EVAL and pool.has_gpus:
        return Placement(stage, pool_name, pool, gpus=EVAL_GPUS)
    return Placement(stage, pool_name, pool)


def place_stages(
    spec: DFlashRunSpec, stages: tuple[Stage, ...], pools: PoolsConfig
) -> tuple[dict[Stage, Placement], list[PlacementError]]:
    """Placements of every stage, and every reason the run does not fit (first one first)."""
    placements: dict[Stage, Placement] = {}
    errors: list[PlacementError] = []
    for stage in stages:
        placed = place_stage(spec, stage, pools)
        if isinstance(placed, PlacementError):
            if placed not in errors:
                errors.append(placed)
        else:
            placements[stage] = placed
    return placements, errors
