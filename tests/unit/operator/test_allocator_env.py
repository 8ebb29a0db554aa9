"""Training pods run the CUDA caching allocator with expandable segments unless the pool sets
the allocator itself, and the admission check counts the fragmentation that setting implies."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from dflash_operator.api.constants import Stage
from dflash_operator.api.validation import parse_spec
from dflash_operator.children.meta import RunRef
from dflash_operator.plan.memory_check import check_training_memory
from dflash_operator.plan.placement import place_stage, place_stages
from dflash_operator.plan.stages import (
    PlanSettings,
    StageContext,
    build_pipeline,
    build_stage_child,
)
from dflash_operator.pools import parse_pools

from .conftest import POOLS, spec_dict

RUN = RunRef("r1", "ml", "uid-1")
ROOT = "s3://artifacts/dflash/ml/r1/uid-1"


def pools_with_env(env: dict[str, str]) -> Any:
    raw = copy.deepcopy(POOLS)
    for name in ("rtx-pro-6000", "cpu"):
        raw["nodePools"][name]["env"] = dict(env)
    raw["nodePools"]["rtx-pro-6000"]["gpuMemory"] = "95Gi"
    return parse_pools(raw)


def env_of_stage(spec: dict[str, Any], stage: Stage, pools: Any) -> dict[str, str]:
    parsed = parse_spec(spec)
    placements, errors = place_stages(parsed, build_pipeline(parsed), pools)
    assert not errors
    ctx = StageContext(RUN, parsed, ROOT, placements, PlanSettings())
    child = build_stage_child(ctx, stage, 1, False)
    if child["kind"] == "PyTorchJob":
        pod = child["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    else:
        pod = child["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def test_training_pods_get_expandable_segments(make_spec: Callable[..., dict[str, Any]]) -> None:
    env = env_of_stage(make_spec(), Stage.TRAIN, pools_with_env({}))

    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


@pytest.mark.parametrize(
    "pool_env",
    [
        {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"},
        {"PYTORCH_ALLOC_CONF": "expandable_segments:False"},
    ],
)
def test_an_allocator_set_by_the_pool_is_left_alone(
    make_spec: Callable[..., dict[str, Any]], pool_env: dict[str, str]
) -> None:
    env = env_of_stage(make_spec(), Stage.TRAIN, pools_with_env(pool_env))

    assert {k: env.get(k) for k in pool_env} == pool_env
    if "PYTORCH_ALLOC_CONF" in pool_env:  # torch reads it first: ours would only mislead
        assert "PYTORCH_CUDA_ALLOC_CONF" not in env


def test_other_stages_keep_the_default_allocator(make_spec: Callable[..., dict[str, Any]]) -> None:
    env = env_of_stage(make_spec(), Stage.TOKENIZE, pools_with_env({}))

    assert "PYTORCH_CUDA_ALLOC_CONF" not in env


def qwen36_message(pool_env: dict[str, str]) -> str:
    spec = spec_dict(
        target={"model": "Qwen/Qwen3.6-27B"}, drafter={"numLayers": 5, "blockSize": 16}
    )
    spec["training"] = {"nodes": 2, "gpusPerNode": 4, "strategy": "fsdp", "batchSize": 4}
    parsed = parse_spec(spec)
    result = check_training_memory(
        parsed, place_stage(parsed, Stage.TRAIN, pools_with_env(pool_env))
    )  # type: ignore[arg-type]
    assert result is not None and result.fits is False
    return result.message


def workspace_gib(message: str) -> float:
    return float(message.split("workspace ", 1)[1].split(" GiB", 1)[0])


def test_the_admission_check_counts_the_fragmentation_of_the_pools_allocator() -> None:
    expandable = workspace_gib(qwen36_message({}))
    fixed = workspace_gib(qwen36_message({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}))

    # 15% instead of 5% of a ~130 GiB tensor peak
    assert fixed - expandable > 10
