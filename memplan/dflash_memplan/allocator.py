"""The CUDA caching allocator's setting, and the fragmentation the plan allows for it.

Trainer pods run with `expandable_segments:True` unless the user sets the allocator themselves
(the operator's `children/pod.py`): with it, freed blocks of one growing segment are reused
whatever their size; without it, blocks are carved out of fixed segments, and the shapes that
change every micro-batch (sequence lengths, anchors, the loss's last chunk) strand memory.
"""

from __future__ import annotations

from collections.abc import Mapping

# torch >= 2.9 reads PYTORCH_ALLOC_CONF first and falls back to the older CUDA-only name.
ALLOC_CONF_ENVS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
EXPANDABLE_SEGMENTS = "expandable_segments:True"
# Allowances of the tensor peak, not measurements (docs/memory-plan.md; the GPU smoke kit
# reports reserved / allocated). Expandable segments: rounding and a few stranded blocks.
# Fixed segments with shapes that change every micro-batch: 10-15% is what is seen in
# practice; the plan takes the top of that range.
FRAGMENTATION_EXPANDABLE = 0.05
FRAGMENTATION_FIXED_SEGMENTS = 0.15


def alloc_conf_of(env: Mapping[str, str]) -> str | None:
    """The allocator setting torch will read from this environment (None: torch's default)."""
    for name in ALLOC_CONF_ENVS:
        if env.get(name):
            return env[name]
    return None


def is_expandable(conf: str | None) -> bool:
    """Does this `PYTORCH_CUDA_ALLOC_CONF` value turn expandable segments on?"""
    for item in (conf or "").split(","):
        key, _, value = item.partition(":")
        if key.strip() == "expandable_segments":
            return value.strip().lower() in {"true", "1"}
    return False


def fragmentation_share(expandable_segments: bool) -> float:
    return FRAGMENTATION_EXPANDABLE if expandable_segments else FRAGMENTATION_FIXED_SEGMENTS
