"""The torch and transformers versions the trainer supports, checked when a stage starts.

pip enforces the ranges of trainer/pyproject.toml, but an image that installs dflash-trainer
with `--no-deps` on a preinstalled stack (the regen image, the GPU smoke kit on an air-gapped
machine) would otherwise fail deep inside its first step. The floors here are the pyproject's
lower bounds (a test keeps them equal); the oldest pair is tested in CI on CPU
(`make test-version-floor`).
"""

from __future__ import annotations

import re

MIN_TORCH = (2, 11)
MIN_TRANSFORMERS = (5, 17)
_RELEASE = re.compile(r"^(\d+)\.(\d+)")


class VersionError(Exception):
    """An installed torch or transformers older than the trainer supports."""


def release_of(version: str) -> tuple[int, int]:
    """(major, minor) of `2.11.0+cu130`, `5.17.0.dev0`, `2.16.0a0`."""
    match = _RELEASE.match(version)
    if not match:
        raise VersionError(f"cannot read the version {version!r}")
    return int(match.group(1)), int(match.group(2))


def build_version_problems(torch_version: str | None, transformers_version: str) -> list[str]:
    """`torch 2.10.0 (needs >= 2.11)` for each package below its floor (torch None: unchecked)."""
    problems = []
    for name, version, floor in (
        ("torch", torch_version, MIN_TORCH),
        ("transformers", transformers_version, MIN_TRANSFORMERS),
    ):
        if version is not None and release_of(version) < floor:
            problems.append(f"{name} {version} (needs >= {floor[0]}.{floor[1]})")
    return problems


def require_supported_versions(*, with_torch: bool = True) -> None:
    """Raise VersionError naming what is installed and what is needed. `with_torch=False`: a
    stage that needs only transformers' tokenizers (tokenization) does not import torch."""
    import transformers

    torch_version = None
    if with_torch:
        import torch

        torch_version = str(torch.__version__)
    problems = build_version_problems(torch_version, transformers.__version__)
    if problems:
        raise VersionError(
            f"dflash-trainer cannot run on {', '.join(problems)}; installed: torch "
            f"{torch_version or '(not checked)'}, transformers {transformers.__version__}. "
            f"Install torch >= "
            f"{MIN_TORCH[0]}.{MIN_TORCH[1]} and transformers >= "
            f"{MIN_TRANSFORMERS[0]}.{MIN_TRANSFORMERS[1]} (trainer/pyproject.toml)"
        )
