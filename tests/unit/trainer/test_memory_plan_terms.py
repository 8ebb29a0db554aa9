"""The memory plan's newer terms and where `python -m dflash_trainer.plan` takes the GPU memory
from: FSDP2's unsharded accumulated gradients, fragmentation by allocator setting, the pool's
gpuMemory or GPU product, and a plain `fit NOT judged` (exit 3) when none is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_memplan.allocator import (
    FRAGMENTATION_EXPANDABLE,
    FRAGMENTATION_FIXED_SEGMENTS,
    alloc_conf_of,
    is_expandable,
)
from dflash_memplan.estimate import GIB, WORKSPACE_FIXED_BYTES, RankSetup, estimate_rank_memory
from dflash_memplan.gpus import CHART_POOL_PRODUCTS, CHART_TRAINING_POOL, GPU_PRODUCT_MEMORY
from dflash_memplan.known import known_target_shape
from dflash_memplan.shapes import build_drafter_shape
from dflash_trainer.plan.__main__ import EXIT_NOT_JUDGED, main

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "qwen3.6-27b.yaml"


def qwen36(**setup: Any) -> Any:
    target = known_target_shape("Qwen/Qwen3.6-27B")
    assert target is not None
    drafter = build_drafter_shape(target, num_layers=5, block_size=16)
    base: dict[str, Any] = {"batch_size": 1, "max_seq_len": 3072, "anchors_per_sequence": 512,
                            "loss_chunk_tokens": 1024, "world_size": 8, "strategy": "fsdp2"}  # fmt: skip
    return estimate_rank_memory(target, drafter, RankSetup(**{**base, **setup})), drafter


@pytest.mark.parametrize(
    ("conf", "expandable"),
    [
        ("expandable_segments:True", True),
        ("max_split_size_mb:512,expandable_segments:True", True),
        ("expandable_segments:False", False),
        ("max_split_size_mb:512", False),
        (None, False),
    ],
)
def test_the_allocator_setting_is_read_like_torch(conf: str | None, expandable: bool) -> None:
    assert is_expandable(conf) is expandable


def test_pytorch_alloc_conf_wins_over_the_cuda_only_name() -> None:
    env = {"PYTORCH_ALLOC_CONF": "expandable_segments:False",
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # fmt: skip
    assert alloc_conf_of(env) == "expandable_segments:False"
    assert alloc_conf_of({}) is None


def test_fragmentation_follows_the_allocator_setting() -> None:
    expandable, _ = qwen36()
    fixed, _ = qwen36(expandable_segments=False)

    assert expandable.tensor_bytes == fixed.tensor_bytes
    for estimate, share in ((expandable, FRAGMENTATION_EXPANDABLE),
                            (fixed, FRAGMENTATION_FIXED_SEGMENTS)):  # fmt: skip
        assert estimate.workspace.bytes == WORKSPACE_FIXED_BYTES + int(
            estimate.tensor_bytes * share
        )
    assert "15%" in fixed.workspace.detail and "fixed segments" in fixed.workspace.detail


@pytest.mark.parametrize(("reduce_bytes", "dtype"), [(4, "float32"), (2, "bf16")])
def test_fsdp2_accumulation_keeps_the_whole_gradient_in_the_reduce_dtype(
    reduce_bytes: int, dtype: str
) -> None:
    estimate, drafter = qwen36(grad_accum=4, reduce_bytes=reduce_bytes)
    terms = {term.name: term for term in estimate.phase("backward").terms}

    held = terms["FSDP2 accumulated gradients"]
    assert held.bytes == drafter.count_params() * reduce_bytes
    assert dtype in held.detail
    assert "drafter gradients" not in terms  # no sharded gradient until the last reduce-scatter


def test_without_accumulation_fsdp2_holds_no_whole_gradient() -> None:
    estimate, _ = qwen36(grad_accum=1)

    assert "FSDP2 accumulated gradients" not in {t.name for t in estimate.phase("backward").terms}


def test_ddp_accumulation_keeps_its_float32_gradients() -> None:
    estimate, drafter = qwen36(grad_accum=4, strategy="ddp")
    terms = {term.name: term for term in estimate.phase("backward").terms}

    assert terms["drafter gradients"].bytes == drafter.count_params() * 4


def test_the_gpu_table_is_the_charts_pools() -> None:
    values = yaml.safe_load((REPO / "charts" / "dflash-operator" / "values.yaml").read_text())
    for pool, product in CHART_POOL_PRODUCTS.items():
        chart = values["nodePools"][pool]
        assert chart["nodeSelector"]["nvidia.com/gpu.product"] == product
        assert chart["gpuMemory"] == GPU_PRODUCT_MEMORY[product]
    assert values["defaultPools"]["training"] == CHART_TRAINING_POOL


def write(tmp_path: Path, name: str, doc: dict[str, Any]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_without_any_gpu_memory_the_plan_says_fit_was_not_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = write(tmp_path, "train.yaml", {"run_root": str(tmp_path),
                                           "target": {"path": "Qwen/Qwen3-8B"}})  # fmt: skip
    assert main([str(train), "--world-size", "8"]) == EXIT_NOT_JUDGED == 3
    captured = capsys.readouterr()
    assert "total" in captured.out and "GPU memory" not in captured.out
    assert captured.err.startswith("fit NOT judged: no GPU memory is known")
    assert "--gpu-memory" in captured.err and "--pools" in captured.err


def test_a_dflashrun_on_a_chart_pool_is_judged_against_that_pools_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([str(EXAMPLE)]) == 0
    assert "95.00 GiB  fits" in capsys.readouterr().out


def pools_values(**pool: Any) -> dict[str, Any]:
    return {"nodePools": {"rtx-pro-6000": {"gpusPerNode": 4, **pool}}}


@pytest.mark.parametrize(
    ("pool", "code", "shown"),
    [
        ({"gpuMemory": "40Gi"}, 1, "pool rtx-pro-6000: 40Gi"),
        (
            {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}},
            0,
            "pool rtx-pro-6000: 179Gi",
        ),
        ({"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-Unknown"}}, 3, "no gpuMemory"),
    ],
    ids=["gpu-memory", "known-product", "unknown-product"],
)
def test_the_pools_of_the_operators_values_give_the_gpu_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pool: dict[str, Any], code: int, shown: str
) -> None:
    values = write(tmp_path, "values.yaml", pools_values(**pool))

    assert main([str(EXAMPLE), "--pools", str(values)]) == code
    captured = capsys.readouterr()
    assert shown in captured.out + captured.err


def test_a_pool_env_without_expandable_segments_costs_fragmentation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}
    values = write(tmp_path, "values.yaml", pools_values(gpuMemory="95Gi", env=env))

    main([str(EXAMPLE), "--pools", str(values)])
    assert "15% of the tensors (fixed segments)" in capsys.readouterr().out


def test_a_train_yaml_without_world_size_is_asked_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = write(tmp_path, "train.yaml", {"run_root": str(tmp_path),
                                           "target": {"path": "Qwen/Qwen3-8B"}})  # fmt: skip
    assert main([str(train), "--gpu-memory", "95Gi"]) == 2
    assert "a train.yaml does not say how many ranks train: pass --world-size" in (
        capsys.readouterr().err
    )


def test_the_qwen36_example_keeps_its_stated_margin() -> None:
    """docs/memory-plan.md: GPU runs keep at least 10% of the GPU spare until the plan is
    validated on a GPU."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(EXAMPLE)]) == 0
    total = float(out.getvalue().split("total", 1)[1].split("GiB", 1)[0])
    assert total <= 0.9 * 95, total
    assert GIB == 1 << 30


def test_a_manifest_of_another_kind_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = write(tmp_path, "app.yaml", {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application"})
    assert main([str(app)]) == 2
    assert "is a kind: Application, not a DFlashRun nor a train.yaml" in capsys.readouterr().err


@pytest.mark.parametrize(
    "pool",
    [
        {"gpuMemory": "95Gi"},
        {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-Unknown"}},  # fit not judged
    ],
    ids=["judged", "not-judged"],
)
def test_the_pools_allocator_setting_is_honoured_whether_or_not_fit_is_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pool: dict[str, Any]
) -> None:
    """The pool's PYTORCH_CUDA_ALLOC_CONF is what its trainer pods run with: the estimate the
    CLI prints counts its fragmentation even when no GPU memory is known to judge fit."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}
    values = write(tmp_path, "values.yaml", pools_values(**pool, env=env))

    main([str(EXAMPLE), "--pools", str(values)])
    out = capsys.readouterr().out
    assert "15% of the tensors (fixed segments)" in out, out
