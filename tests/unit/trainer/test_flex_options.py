"""The flex_attention kernel options chosen per (compute capability, head width), on CPU: sm_12x
with heads over 128 wide (the Qwen3.6 drafter's 256) gets the backward tiles of the upstream
fix; widths up to 128 and the big-shared-memory GPUs keep torch's defaults."""

from __future__ import annotations

import pytest
import torch
from dflash_trainer.model.block_attention import flex_kernel_options
from dflash_trainer.model.flex_options import (
    RULES,
    SM8X_FORWARD_192,
    SMALL_TILE_BACKWARD,
    build_flex_kernel_options,
    torch_release,
)

TORCH_2_11, TORCH_2_15 = (2, 11), (2, 15)
BOTH = {**SMALL_TILE_BACKWARD, **SM8X_FORWARD_192}
# Names flex_attention's kernel_options take (fwd_/bwd_ prefixes pick one direction).
FLEX_OPTION_NAMES = {
    "BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "num_stages",
    "num_warps",
}  # fmt: skip


@pytest.mark.parametrize(
    ("capability", "width", "torch_version", "expected"),
    [
        ((12, 0), 256, TORCH_2_15, SMALL_TILE_BACKWARD),  # RTX PRO 6000, RTX 5090
        ((12, 1), 256, TORCH_2_11, SMALL_TILE_BACKWARD),  # GB10
        ((12, 0), 192, TORCH_2_15, SMALL_TILE_BACKWARD),  # stages as 256
        ((12, 0), 160, TORCH_2_11, SMALL_TILE_BACKWARD),
        ((12, 0), 128, TORCH_2_15, {}),  # the Qwen3-8B drafter: torch's defaults work
        ((12, 0), 64, TORCH_2_15, {}),
        ((10, 0), 256, TORCH_2_15, {}),  # B200: 227 KiB per block
        ((9, 0), 256, TORCH_2_11, {}),  # H100 / H200
        ((8, 0), 256, TORCH_2_15, {}),  # A100: 163 KiB per block
        ((8, 9), 256, TORCH_2_15, SMALL_TILE_BACKWARD),  # L40, RTX 4090
        ((8, 6), 192, TORCH_2_11, BOTH),  # A10, RTX 3090: the forward fix is not in 2.11
        ((8, 6), 192, TORCH_2_15, SMALL_TILE_BACKWARD),  # ... and is in 2.15
        ((8, 6), 128, TORCH_2_15, {}),
    ],
)
def test_the_options_per_capability_and_head_width(
    capability: tuple[int, int], width: int, torch_version: tuple[int, int], expected: dict
) -> None:
    assert build_flex_kernel_options(capability, width, 2, torch_version) == expected


def test_float32_and_non_cuda_devices_keep_torchs_defaults() -> None:
    assert build_flex_kernel_options((12, 0), 256, element_bytes=4) == {}
    assert build_flex_kernel_options(None, 256) == {}
    assert flex_kernel_options(torch.device("cpu"), 256, 2) == {}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_every_rule_gives_options_flex_attention_accepts(rule: object) -> None:
    options = rule.options  # type: ignore[attr-defined]
    for name in options:
        direction, _, bare = name.partition("_")
        assert direction in {"fwd", "bwd"} and bare in FLEX_OPTION_NAMES, name
    assert rule.upstream.startswith("https://github.com/pytorch/pytorch/")  # type: ignore[attr-defined]
    if "bwd_BLOCK_M1" in options:
        # flex's backward kernel asserts these divide; the 128-token mask blocks must divide too.
        assert options["bwd_BLOCK_N1"] % options["bwd_BLOCK_M1"] == 0
        assert options["bwd_BLOCK_M2"] % options["bwd_BLOCK_N2"] == 0
        for tile in ("bwd_BLOCK_M1", "bwd_BLOCK_N1", "bwd_BLOCK_M2", "bwd_BLOCK_N2"):
            assert 128 % options[tile] == 0


def test_a_rule_fixed_upstream_stops_applying_from_that_torch_release() -> None:
    fixed = [rule for rule in RULES if rule.fixed_in is not None]

    assert fixed
    for rule in fixed:
        assert rule.fixed_in is not None
        before = (rule.fixed_in[0], rule.fixed_in[1] - 1)
        assert rule.options.items() <= build_flex_kernel_options((8, 6), 192, 2, before).items()
        assert (
            not rule.options.items()
            <= build_flex_kernel_options((8, 6), 192, 2, rule.fixed_in).items()
        )


@pytest.mark.parametrize(
    ("text", "release"),
    [("2.15.0+cu132", (2, 15)), ("2.11.0", (2, 11)), ("2.16.0.dev20261201", (2, 16)),
     ("2.12.0rc1", (2, 12))],
)  # fmt: skip
def test_torch_versions_are_read_as_major_minor(text: str, release: tuple[int, int]) -> None:
    assert torch_release(text) == release
