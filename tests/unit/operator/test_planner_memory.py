"""The training memory check at admission: a run whose training cannot fit the training
pool's GPU memory fails before any stage starts, naming the numbers and the fields; unknown
targets are admitted with an event; pools without gpuMemory are not checked."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_operator.api.constants import Stage
from dflash_operator.api.validation import parse_spec
from dflash_operator.plan.memory_check import check_training_memory
from dflash_operator.plan.placement import place_stage
from dflash_operator.pools import PoolsConfig, PoolsError, parse_pools

from .conftest import POOLS, Sim, run_body, spec_dict

REPO = Path(__file__).resolve().parents[3]


def pools_with_memory(rtx: str | None = "95Gi") -> PoolsConfig:
    raw = copy.deepcopy(POOLS)
    if rtx is not None:
        raw["nodePools"]["rtx-pro-6000"]["gpuMemory"] = rtx
    raw["nodePools"]["b200"]["gpuMemory"] = "179Gi"
    return parse_pools(raw)


def qwen36_spec(**training: Any) -> dict[str, Any]:
    spec = spec_dict(
        target={"model": "Qwen/Qwen3.6-27B"},
        drafter={"numLayers": 5, "blockSize": 16},
    )
    spec["training"] = {"nodes": 2, "gpusPerNode": 4, "strategy": "fsdp", **training}
    return spec


def check(spec: dict[str, Any], pools: PoolsConfig) -> Any:
    parsed = parse_spec(spec)
    placement = place_stage(parsed, Stage.TRAIN, pools)
    return check_training_memory(parsed, placement)  # type: ignore[arg-type]


def test_the_shipped_qwen36_example_fits_the_chart_pools() -> None:
    example = yaml.safe_load((REPO / "examples" / "qwen3.6-27b.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "dflash-operator" / "values.yaml").read_text())
    pools = parse_pools(
        {
            "nodePools": values["nodePools"],
            "defaults": {k: v for k, v in values["defaultPools"].items() if v},
        }
    )
    result = check(example["spec"], pools)
    assert result is not None and result.fits is True, result


def test_a_batch_that_does_not_fit_names_the_numbers_and_the_fields() -> None:
    result = check(qwen36_spec(batchSize=4), pools_with_memory())
    assert result is not None and result.fits is False
    message = result.message
    assert "node pool rtx-pro-6000 has 95.00 GiB (gpuMemory)" in message
    assert "frozen target 50.10 GiB" in message and "activations" in message
    assert "spec.training.batchSize 4 -> 2" in message
    assert "spec.training.anchorsPerSequence 512 -> 256" in message


def test_ddp_of_a_large_drafter_is_told_to_use_fsdp() -> None:
    result = check(qwen36_spec(batchSize=1, strategy="ddp"), pools_with_memory())
    assert result is not None and result.fits is False
    assert "spec.training.strategy ddp -> fsdp" in result.message


@pytest.mark.parametrize(
    ("pools", "spec"),
    [
        (pools_with_memory(rtx=None), qwen36_spec(batchSize=64)),  # no gpuMemory: no check
        (pools_with_memory(), {**qwen36_spec(batchSize=64), "training": {"nodePool": "cpu"}}),
    ],
    ids=["pool-without-gpu-memory", "cpu-pool"],
)
def test_nothing_is_checked_without_gpu_memory_or_gpus(
    pools: PoolsConfig, spec: dict[str, Any]
) -> None:
    assert check(spec, pools) is None


def test_a_run_that_cannot_train_fails_before_regeneration() -> None:
    world = Sim(run_body(spec=qwen36_spec(batchSize=4)), pools_with_memory())
    world.step()
    failed = world.condition("Failed")
    assert world.status["phase"] == "Failed"
    assert failed is not None and failed["reason"] == "TrainingWontFit"
    assert "spec.training.batchSize" in failed["message"]
    assert world.created == []
    assert ("TrainingWontFit", failed["message"]) in world.events()


def test_an_unknown_target_is_admitted_with_one_event() -> None:
    spec = {**qwen36_spec(batchSize=64), "target": {"model": "acme/secret-27b"}}
    world = Sim(run_body(spec=spec), pools_with_memory())
    world.step()
    world.step()
    assert world.status["phase"] == "FetchingModel"  # a Hub id: the model stage copies it first
    skipped = [m for r, m in world.events() if r == "MemoryCheckSkipped"]
    assert len(skipped) == 1
    assert "acme/secret-27b" in skipped[0] and "--target-config" in skipped[0]


def test_an_edit_before_training_is_checked_but_a_started_training_is_not(
    sim: Callable[..., Any],
) -> None:
    world = Sim(run_body(spec=qwen36_spec(batchSize=1)), pools_with_memory())
    world.step()
    assert world.status["phase"] == "FetchingModel"
    world.step(lambda body: body["spec"]["training"].update(batchSize=6))
    failed = world.condition("Failed")
    assert failed is not None and failed["reason"] == "TrainingWontFit"

    started = Sim(run_body(spec=qwen36_spec(batchSize=1)), pools_with_memory())
    started.step()
    started.finish_data_stages()
    assert "r1-train" in started.created
    started.step(lambda body: body["spec"]["training"].update(batchSize=6))
    assert started.condition("Failed") is None


@pytest.mark.parametrize(
    ("pool", "error"),
    [
        ({"gpusPerNode": 0, "gpuMemory": "96Gi"}, "gpuMemory is set on a pool without GPUs"),
        ({"gpusPerNode": 4, "gpuMemory": "96Gb"}, "gpuMemory"),
        ({"gpusPerNode": 4, "gpuMemory": "500m"}, "gpuMemory"),
    ],
)
def test_a_wrong_gpu_memory_is_refused(pool: dict[str, Any], error: str) -> None:
    raw = copy.deepcopy(POOLS)
    raw["nodePools"]["extra"] = pool
    with pytest.raises(PoolsError, match=error):
        parse_pools(raw)


def test_activation_checkpointing_is_offered_and_reaches_the_trainer() -> None:
    from dflash_operator.children.config_map import build_train_file

    tight = pools_with_memory(rtx="90Gi")
    result = check(qwen36_spec(batchSize=2, gradientAccumulationSteps=2), tight)
    assert result is not None and result.fits is False
    assert "spec.training.activationCheckpointing false -> true" in result.message
    spec = qwen36_spec(batchSize=2, gradientAccumulationSteps=2, activationCheckpointing=True)
    result = check(spec, tight)
    assert result is not None and result.fits is True
    train = build_train_file(parse_spec(spec), "s3://b/run")
    assert train["drafter"]["activation_checkpointing"] is True
    assert (
        "activation_checkpointing"
        not in build_train_file(parse_spec(qwen36_spec()), "s3://b")["drafter"]
    )


@pytest.mark.parametrize(
    ("audit", "every"), [({}, 10), ({"likelihood": {"monitorEverySteps": 0}}, 0)]
)
def test_the_check_counts_the_likelihood_monitor_the_run_will_have(
    audit: dict[str, Any], every: int
) -> None:
    """The trainer gets spec.audit.likelihood.monitorEverySteps (on by default): its LM-head
    chunk is one of the phases the check weighs."""
    from dflash_memplan.estimate import estimate_rank_memory
    from dflash_memplan.known import known_target_shape
    from dflash_operator.children.config_map import build_train_file
    from dflash_operator.plan.memory_check import build_rank_inputs

    spec = parse_spec({**qwen36_spec(batchSize=1), "audit": audit})
    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    drafter, setup = build_rank_inputs(spec, target, world_size=8)

    assert setup.monitor_every_steps == every
    assert build_train_file(spec, "s3://b/run")["likelihood"]["every_steps"] == every
    phases = [p.name for p in estimate_rank_memory(target, drafter, setup).phases]
    assert ("likelihood monitor" in phases) is (every > 0)


def dflash2_spec(dflash2: dict[str, Any] | None = None, **training: Any) -> dict[str, Any]:
    """The Qwen3.6-27B run with a DFlash2 drafter of the same depth and block size."""
    spec = qwen36_spec(**training)
    spec["drafter"] = {**spec["drafter"], "architecture": "dflash2"}
    if dflash2 is not None:
        spec["drafter"]["dflash2"] = dflash2
    return spec


def test_the_check_plans_the_dflash2_drafter_the_trainer_will_get() -> None:
    """The knobs the operator writes into train.yaml are the ones its plan counts; unset, the
    trainer's defaults; a DFlash drafter has none."""
    from dflash_memplan.known import known_target_shape
    from dflash_memplan.shapes import DFlash2Shape
    from dflash_operator.children.config_map import build_train_file
    from dflash_operator.plan.memory_check import build_rank_inputs

    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    knobs = {"convKernelSize": 3, "convGroupSize": 32, "selectorRank": 128, "selectorTopK": 8}
    spec = parse_spec(dflash2_spec(knobs))
    drafter, _ = build_rank_inputs(spec, target, world_size=8)
    written = build_train_file(spec, "s3://b/run")["drafter"]["dflash2"]

    assert drafter.dflash2 == DFlash2Shape(conv_kernel_size=3, conv_group_size=32,
                                           selector_rank=128, selector_top_k=8)  # fmt: skip
    assert {k: written[k] for k in ("conv_kernel_size", "conv_group_size", "selector_rank",
                                    "selector_top_k")} == drafter.dflash2.__dict__  # fmt: skip
    default, _ = build_rank_inputs(parse_spec(dflash2_spec()), target, world_size=8)
    assert default.dflash2 == DFlash2Shape()
    plain, _ = build_rank_inputs(parse_spec(qwen36_spec()), target, world_size=8)
    assert plain.dflash2 is None


def test_a_dflash2_run_plans_its_codebooks_about_2_gib_more_than_dflash_on_one_gpu() -> None:
    """Two [248,320, 256] codebooks with their gradients and AdamW moments, float32: 1.89 GiB
    on a rank that holds them whole (one GPU or DDP), on top of everything else DFlash2 adds."""
    from dflash_memplan.estimate import GIB, estimate_rank_memory
    from dflash_memplan.known import known_target_shape
    from dflash_operator.plan.memory_check import build_rank_inputs

    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    one_gpu = {"nodes": 1, "gpusPerNode": 1, "strategy": "ddp", "batchSize": 1}
    plans = {}
    for name, spec in (("dflash", qwen36_spec(**one_gpu)), ("dflash2", dflash2_spec(**one_gpu))):
        drafter, setup = build_rank_inputs(parse_spec(spec), target, world_size=1)
        plans[name] = estimate_rank_memory(target, drafter, setup)
    codebooks = 2 * 248_320 * 256

    def persistent(name: str) -> dict[str, int]:
        return {t.name: t.bytes for t in plans[name].persistent}

    extra = plans["dflash2"].drafter.count_params() - plans["dflash"].drafter.count_params()
    assert extra > codebooks  # the codebooks, the projection and the convolutions
    for term in ("drafter parameters", "optimizer state"):  # 4 B + 8 B per parameter
        grown = persistent("dflash2")[term] - persistent("dflash")[term]
        assert grown == extra * {"drafter parameters": 4, "optimizer state": 8}[term]
    gradients = {t.name: t.bytes for t in plans["dflash2"].phase("backward").terms}
    assert gradients["selector gradients"] == (codebooks + 256 * 5120) * 4
    assert 1.8 < codebooks * 16 / GIB < 2.0  # weights, gradients, AdamW moments
    assert plans["dflash2"].total_bytes - plans["dflash"].total_bytes > codebooks * 16


def test_the_admission_check_counts_dflash2_in_what_it_reports() -> None:
    """The shipped 8-rank FSDP2 recipe: the DFlash2 run needs more, and says so in the check's
    message (the codebooks are sharded over the 8 ranks)."""
    pools = pools_with_memory()
    spec = {"activationCheckpointing": True, "batchSize": 1}
    results = {"dflash": check(qwen36_spec(**spec), pools),
               "dflash2": check(dflash2_spec(**spec), pools)}  # fmt: skip

    needed = {}
    for name, result in results.items():
        assert result is not None and result.fits is True, result
        needed[name] = float(result.message.split("training needs ")[1].split(" GiB")[0])
    assert needed["dflash2"] > needed["dflash"]
