"""Requests and limits of stage pods: the operator's defaults per stage (per GPU on GPU
pools), the pool's layers and the spec's, key by key, never a request above its limit."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from dflash_operator.api.constants import Stage
from dflash_operator.api.validation import parse_spec
from dflash_operator.children.resources import build_resources, tmp_size_limit
from dflash_operator.plan.placement import place_stages
from dflash_operator.plan.stages import build_pipeline
from dflash_operator.pools import PoolsError, parse_pools

from .conftest import POOLS, spec_dict


def resources(stage: Stage, pools: dict[str, Any] | None = None, **overrides: Any) -> Any:
    config = parse_pools(pools or POOLS)
    spec = parse_spec(spec_dict(**overrides))
    placements, errors = place_stages(spec, (*build_pipeline(spec), Stage.CLEANUP), config)
    assert not errors
    return build_resources(spec, stage, placements[stage])


def test_every_stage_pod_has_requests_and_limits_of_cpu_memory_and_storage() -> None:
    for stage in (Stage.REGEN, Stage.AUDIT_COMPLETIONS, Stage.TOKENIZE, Stage.TRAIN, Stage.CLEANUP):
        out = resources(stage)
        for part in ("requests", "limits"):
            assert {"cpu", "memory", "ephemeral-storage"} <= set(out[part]), (stage, out)


def test_gpu_pods_scale_host_resources_with_their_gpus() -> None:
    one = resources(Stage.REGEN, regeneration={"shards": 2, "tensorParallel": 1})
    four = resources(Stage.REGEN, regeneration={"shards": 2, "tensorParallel": 4})
    assert (one["requests"]["memory"], four["requests"]["memory"]) == ("96Gi", "384Gi")
    assert (one["requests"]["cpu"], four["limits"]["cpu"]) == ("8", "64")
    assert four["requests"]["nvidia.com/gpu"] == four["limits"]["nvidia.com/gpu"] == "4"


def test_the_pool_then_the_spec_override_key_by_key() -> None:
    pools = copy.deepcopy(POOLS)
    pools["nodePools"]["cpu"]["resources"] = {
        "default": {"requests": {"cpu": "6"}, "limits": {"cpu": "12"}},
        "tokenization": {"requests": {"memory": "40Gi"}, "limits": {"memory": "40Gi"}},
    }
    out = resources(Stage.TOKENIZE, pools, tokenization={"resources": {"requests": {"cpu": 10}}})
    assert out["requests"]["cpu"] == "10"  # the spec's
    assert out["limits"]["cpu"] == "12"  # the pool's default
    assert out["requests"]["memory"] == out["limits"]["memory"] == "40Gi"  # the pool's section
    audit = resources(Stage.AUDIT_COMPLETIONS, pools)
    assert audit["requests"]["cpu"] == "6" and audit["requests"]["memory"] == "8Gi"


def test_a_request_above_an_inherited_limit_raises_the_limit_and_a_low_limit_caps_it() -> None:
    raised = resources(
        Stage.AUDIT_COMPLETIONS, audit={"resources": {"requests": {"memory": "64Gi"}}}
    )
    assert raised["requests"]["memory"] == raised["limits"]["memory"] == "64Gi"
    capped = resources(Stage.AUDIT_COMPLETIONS, audit={"resources": {"limits": {"cpu": "500m"}}})
    assert capped["requests"]["cpu"] == capped["limits"]["cpu"] == "500m"


def test_tmp_is_sized_by_ephemeral_storage() -> None:
    out = resources(
        Stage.TRAIN, training={"nodes": 2, "resources": {"limits": {"ephemeral-storage": "300Gi"}}}
    )
    assert tmp_size_limit(out) == "300Gi"
    assert out["requests"]["ephemeral-storage"] == "100Gi"  # the default request stays


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"trainer": {"requests": {"cpu": 1}}}, "resources key 'trainer' is not accepted"),
        ({"default": {"requests": {"nvidia.com/gpu": 1}}}, "may not set 'nvidia.com/gpu'"),
    ],
)
def test_a_wrong_pool_resources_entry_is_refused_by_name(entry: Any, words: str) -> None:
    pools = copy.deepcopy(POOLS)
    pools["nodePools"]["b200"]["resources"] = entry
    with pytest.raises(PoolsError, match=words):
        parse_pools(pools)
