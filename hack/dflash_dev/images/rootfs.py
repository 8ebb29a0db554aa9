"""A writable root filesystem per container, from an image in local storage (Buildah's or
Podman's containers-storage): `create_rootfs` makes a working container of the image and mounts
it (an overlay: the image's layers read-only, a fresh upper layer for this container), and
`remove_rootfs` unmounts and deletes it. The chroot launcher (chroot.py) runs commands in it."""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dflash_dev.errors import DevError

from .engine import Engine

log = logging.getLogger(__name__)
# Every working container this tooling creates is named so, and only those are ever removed.
NAME_PREFIX = "dflash-rootfs-"


@dataclass(frozen=True)
class Rootfs:
    name: str  # the working container's name
    path: Path  # where its root filesystem is mounted on this machine
    image: str


def _run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DevError(
            f"{' '.join(argv[:3])} ... exited {result.returncode}: {result.stderr.strip()}"
        )
    return result.stdout.strip()


def create_rootfs(engine: Engine, image: str, name: str) -> Rootfs:
    """A fresh working container of `image` named NAME_PREFIX + `name`, mounted. Never pulls:
    the image must be in local storage (DevError says how to build it)."""
    if not engine.stores_locally:
        raise DevError(
            f"running from images needs Buildah or Podman (containers-storage); {engine.kind} "
            "keeps its images in its daemon"
        )
    full = NAME_PREFIX + name
    remove_rootfs(engine, full)  # a leftover of a crashed run
    if engine.kind == "buildah":
        create = [engine.binary, "from", "--pull=never", "--name", full, image]
        mount = [engine.binary, "mount", full]
    else:
        create = [engine.binary, "create", "--pull=never", "--name", full, image, "true"]
        mount = [engine.binary, "mount", full]
    try:
        _run(create)
    except DevError as exc:
        raise DevError(
            f"image {image} cannot be used: {exc}. Build it with `make images` (and "
            "`make base-images` first where its base registries are unreachable)"
        ) from None
    path = Path(_run(mount))
    return Rootfs(full, path, image)


def remove_rootfs(engine: Engine, name: str) -> None:
    """Unmount and delete the working container `name` (nothing when it does not exist)."""
    if not name.startswith(NAME_PREFIX):
        raise ValueError(f"{name}: not a container of this tooling")
    argv = [engine.binary, "rm", name]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0 and "not known" not in result.stderr.lower():
        log.debug("%s: %s", " ".join(argv), result.stderr.strip())


def list_rootfs(engine: Engine) -> list[str]:
    """Names of this tooling's working containers (to clean up after a crash)."""
    if engine.kind == "buildah":
        argv = [engine.binary, "containers", "--format", "{{.ContainerName}}"]
    else:
        argv = [engine.binary, "ps", "-a", "--format", "{{.Names}}"]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    return [n for n in result.stdout.split() if n.startswith(NAME_PREFIX)]
