"""flex_attention `kernel_options` per GPU generation and head width: the one place they are chosen.

torch.compile takes flex_attention's Triton tiles from per-architecture tables. Some (compute
capability, head width) pairs get tiles that need more shared memory than the GPU has, and the
compile fails at the first backward ("No valid triton configs ... out of resource: shared
memory"). Each rule below names the upstream issue; remove a rule once every supported torch
carries its fix (`fixed_in`). docs/trainer.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

Capability = tuple[int, int]
# Shared memory one thread block may use on sm_8.6/8.7/8.9 and sm_12.x (RTX 30/40/50, RTX PRO
# 6000 Blackwell, GB10), against 227 KiB on sm_9.0/10.x: the budget every rule here is about.
SMALL_SHARED_MEMORY_BYTES = 101_376
# Backward tiles of pytorch/pytorch#198228 for sm_12x, head widths over 128: measured there as
# the fastest that fit on GB10 (sm_12.1) at widths 192 and 256, gradients within 4.1e-3 of a
# float64 reference.
SMALL_TILE_BACKWARD = {
    "bwd_BLOCK_M1": 32,
    "bwd_BLOCK_N1": 32,
    "bwd_BLOCK_M2": 32,
    "bwd_BLOCK_N2": 32,
    "bwd_num_stages": 2,
    "bwd_num_warps": 4,
}
# Forward tiles of pytorch/pytorch#181835 for sm_8.x at width 192 (issue #180278).
SM8X_FORWARD_192 = {"fwd_BLOCK_M": 128, "fwd_BLOCK_N": 32, "fwd_num_stages": 2, "fwd_num_warps": 8}
# Widths above this are staged as 256 (head dims round up to a power of two), the failing case.
WIDE_HEAD = 128


def _is_sm12x(capability: Capability) -> bool:
    return capability[0] == 12


def _is_small_sm8x(capability: Capability) -> bool:
    """sm_8.6/8.7/8.9: Ampere/Ada consumer parts, with sm_12x's per-block budget (not sm_8.0)."""
    return capability[0] == 8 and capability[1] >= 6


@dataclass(frozen=True)
class FlexRule:
    """Where torch's default tiles are known to fail, and the options that replace them."""

    name: str
    upstream: str
    applies: Callable[[Capability, int], bool]
    options: Mapping[str, int]
    # The first torch release with the upstream fix; None: not released yet.
    fixed_in: tuple[int, int] | None = None
    why: str = field(default="", compare=False)


RULES: tuple[FlexRule, ...] = (
    FlexRule(
        name="sm12x-wide-heads-backward",
        upstream="https://github.com/pytorch/pytorch/issues/198224 (fix: pull 198228)",
        applies=lambda cap, width: _is_sm12x(cap) and width > WIDE_HEAD,
        options=SMALL_TILE_BACKWARD,
        why="torch's sm12x backward default (64, 64, 64, 64, 1 stage, 4 warps) needs 114,688 B "
        "of shared memory at widths over 128; the GPU allows 101,376 B",
    ),
    FlexRule(
        name="sm86-89-wide-heads-backward",
        upstream="https://github.com/pytorch/pytorch/issues/133254 (same budget as 198224)",
        applies=lambda cap, width: _is_small_sm8x(cap) and width > WIDE_HEAD,
        options=SMALL_TILE_BACKWARD,
        why="torch's sm8x backward default at these widths is the same 64-wide tiles with 2 "
        "stages, more than the 114,688 B sm12x already fails with, on the same 101,376 B "
        "budget (by that arithmetic; not measured here)",
    ),
    FlexRule(
        name="sm86-89-width-192-forward",
        upstream="https://github.com/pytorch/pytorch/issues/180278 (fix: pull 181835)",
        applies=lambda cap, width: _is_small_sm8x(cap) and WIDE_HEAD < width <= 192,
        options=SM8X_FORWARD_192,
        # In torch 2.15's table, not in 2.11's (both read); 2.12-2.14 unread, so the rule stays
        # on for them: it sets the same tiles as the fix.
        fixed_in=(2, 15),
        why="the forward default (64, 64, 3 stages) needs ~144 KiB at width 192",
    ),
)


def build_flex_kernel_options(
    capability: Capability | None,
    head_dim: int,
    element_bytes: int = 2,
    torch_version: tuple[int, int] = (0, 0),
) -> dict[str, int]:
    """The kernel_options for flex_attention on this GPU (capability None: not a CUDA device,
    no options). Only 16-bit inputs are affected: torch's float32 tiles are already small."""
    if capability is None or element_bytes != 2:
        return {}
    options: dict[str, int] = {}
    for rule in matching_rules(capability, head_dim, torch_version):
        options.update(rule.options)
    return options


def matching_rules(
    capability: Capability, head_dim: int, torch_version: tuple[int, int]
) -> list[FlexRule]:
    """The rules in force for this GPU, width and torch (a fixed one no longer applies)."""
    return [
        rule
        for rule in RULES
        if rule.applies(capability, head_dim)
        and (rule.fixed_in is None or torch_version < rule.fixed_in)
    ]


def torch_release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string such as `2.15.0+cu132`."""
    major, minor, *_ = (version.split("+")[0] + ".0.0").split(".")
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
