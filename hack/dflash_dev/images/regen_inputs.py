"""Whether CI must build the regen image: it is the one image too large for CI's hour (a vLLM
base of about 10 GB, built from nothing on a fresh machine), so CI builds and tests it only
when what it is made of changed since it was last built and tested (`make test-images` writes
the stamp images/regen/tested-inputs.sha256; commit it with the change). The trainer's code is
not an input here: the trainer image carries the same code and CI tests it on every run."""

from __future__ import annotations

import hashlib
from pathlib import Path

from dflash_dev.paths import REPO_ROOT

# What the regen image is built from, besides dflash-trainer's code.
INPUTS = (
    "images/regen/Dockerfile",
    "images/regen/requirements.txt",
    "images/base/vllm/Dockerfile",
    "images/base/cuda/Dockerfile",
    "images/base/uv/Dockerfile",
    "trainer/pyproject.toml",
    "memplan/pyproject.toml",
)
STAMP = REPO_ROOT / "images" / "regen" / "tested-inputs.sha256"


def inputs_digest(root: Path = REPO_ROOT) -> str:
    digest = hashlib.sha256()
    for name in INPUTS:
        digest.update(name.encode() + b"\0")
        digest.update((root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def is_changed(root: Path = REPO_ROOT) -> bool:
    """True when the inputs differ from those the stamp records (or there is no stamp)."""
    stamp = root / STAMP.relative_to(REPO_ROOT)
    try:
        recorded = stamp.read_text().split()[0]
    except (OSError, IndexError):
        return True
    return recorded != inputs_digest(root)


def write_stamp(root: Path = REPO_ROOT) -> Path:
    stamp = root / STAMP.relative_to(REPO_ROOT)
    stamp.write_text(
        f"{inputs_digest(root)}  the regen image's inputs when its image tests last passed "
        "(make test-images); CI builds it only when they differ\n"
    )
    return stamp
