"""The transformers engine's device, dtype and continuous-batching options, resolved against this
machine and the transformers installed here (the lock's, the version floor's, the regen image's)."""

from __future__ import annotations

import pytest
from dflash_trainer.data.regenerate.hf_options import (
    EngineOptionError,
    accepted_options,
    build_batching_options,
    resolve_device,
    resolve_dtype,
    resolve_streaming,
)
from transformers.generation.configuration_utils import ContinuousBatchingConfig

# What the engine asks for on the CPU, under its own (newest) names.
CPU_OPTIONS = {
    "max_requests_per_batch": 8, "seed": 3, "page_size": 64, "num_blocks": 32,
    "max_batch_tokens": 256, "allow_block_sharing": False, "use_cuda_graph": False,
    "use_async_batching": False, "auto_switch_to_flash": False,
}  # fmt: skip


@pytest.mark.parametrize(
    ("requested", "cuda", "expected"),
    [("auto", True, "cuda"), ("auto", False, "cpu"), ("cpu", True, "cpu"), ("cuda", True, "cuda")],
)
def test_auto_picks_the_gpu_when_torch_sees_one(requested: str, cuda: bool, expected: str) -> None:
    assert resolve_device(requested, cuda) == expected


def test_a_device_that_is_not_there_is_refused_with_the_flag_named() -> None:
    with pytest.raises(EngineOptionError, match=r"--device cuda: torch sees no CUDA GPU"):
        resolve_device("cuda", cuda_available=False)
    with pytest.raises(EngineOptionError, match=r"--device 'tpu'.*auto, cpu, cuda"):
        resolve_device("tpu", cuda_available=True)


@pytest.mark.parametrize(
    ("declared", "device", "stored", "expected"),
    [
        ("auto", "cpu", "bfloat16", "float32"),  # exact on the CPU
        ("auto", "cuda", "bfloat16", "bfloat16"),  # the checkpoint's half precision
        ("auto", "cuda", "torch.float16", "float16"),
        ("auto", "cuda", "float32", "bfloat16"),  # half precision on a GPU, as vLLM serves it
        ("auto", "cuda", None, "bfloat16"),
        ("bfloat16", "cpu", "float32", "bfloat16"),  # declared wins, wherever it runs
        ("BF16", "cuda", None, "bfloat16"),
        ("half", "cuda", None, "float16"),
        ("float", "cuda", "bfloat16", "float32"),
    ],
)
def test_the_declared_dtype_is_used_and_auto_follows_the_device_and_checkpoint(
    declared: str, device: str, stored: str | None, expected: str
) -> None:
    assert resolve_dtype(declared, device, stored) == expected


def test_an_unknown_dtype_is_refused_with_what_is_accepted() -> None:
    with pytest.raises(EngineOptionError, match=r"--dtype 'int8' is not a dtype: use one of auto"):
        resolve_dtype("int8", "cuda", None)


def test_batching_modes_map_to_the_engines_streaming_choice() -> None:
    assert [resolve_streaming(m) for m in ("auto", "continuous", "static")] == [None, True, False]
    with pytest.raises(EngineOptionError, match=r"--batching 'paged'.*auto, continuous, static"):
        resolve_streaming("paged")


def test_the_cpu_options_construct_the_installed_transformers_config() -> None:
    """The regression of issue 29: transformers 5.17 has `block_size` and no `page_size` or
    `auto_switch_to_flash`; passing them raised TypeError. Whatever is installed here takes
    the options built for it, and keeps the page size and the seed."""
    accepted = accepted_options(ContinuousBatchingConfig)
    options, dropped = build_batching_options(CPU_OPTIONS, accepted)
    config = ContinuousBatchingConfig(**options)
    page = getattr(config, "page_size", None) or getattr(config, "block_size", None)
    assert page == 64
    assert config.seed == 3 and config.max_requests_per_batch == 8
    assert set(dropped) <= {"auto_switch_to_flash"}, dropped


def test_a_renamed_option_goes_under_the_older_name_and_an_unknown_one_is_reported() -> None:
    floor_fields = {"block_size", "num_blocks", "seed", "max_requests_per_batch"}  # 5.17's names
    options, dropped = build_batching_options(
        {"page_size": 64, "seed": 1, "auto_switch_to_flash": False}, floor_fields
    )
    assert options == {"block_size": 64, "seed": 1}
    assert dropped == ["auto_switch_to_flash"]
    newest, none_dropped = build_batching_options({"page_size": 64}, {"page_size", "block_size"})
    assert newest == {"page_size": 64} and none_dropped == []
