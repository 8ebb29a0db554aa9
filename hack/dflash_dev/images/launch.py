"""How a container of an image starts, as a runtime would start it: the command (Kubernetes'
rules for command/args over the image's ENTRYPOINT/CMD), the user (the pod's runAsUser over
the image's USER), the environment (the image's, then the runtime's, then the container's),
and the launch spec the chroot launcher (chroot.py) reads. `run_in_image` runs one command
to its end (the image tests); the executor's image mode starts pods with `launcher_argv`."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflash_dev.errors import DevError

from .engine import Engine, ImageConfig, image_config
from .rootfs import create_rootfs, remove_rootfs

ROOT_UID = 0


@dataclass(frozen=True)
class Mount:
    """A bind mount of `source` (a file or folder here) at `target` inside the container, or a
    fresh tmpfs at `target` when `tmpfs` is set."""

    target: str
    source: str = ""
    readonly: bool = False
    tmpfs: bool = False

    def to_spec(self) -> dict[str, Any]:
        if self.tmpfs:
            return {"kind": "tmpfs", "source": "tmpfs", "target": self.target}
        return {
            "kind": "bind",
            "source": self.source,
            "target": self.target,
            "readonly": self.readonly,
        }


def build_command(config: ImageConfig, command: list[str], args: list[str]) -> list[str]:
    """Kubernetes' rules: `command` replaces ENTRYPOINT (and drops CMD); `args` replaces CMD."""
    if command:
        return [*command, *args]
    if args:
        return [*config.entrypoint, *args]
    return [*config.entrypoint, *config.cmd]


def _lookup(file: Path, name: str, field_index: int) -> int | None:
    try:
        lines = file.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":")
        if len(parts) > field_index and parts[0] == name:
            return int(parts[field_index])
    return None


def resolve_user(
    config: ImageConfig, rootfs: Path, run_as_user: int | None, run_as_group: int | None
) -> tuple[int, int]:
    """(uid, gid): the pod's runAsUser/runAsGroup over the image's USER (numeric, or a name of
    the image's /etc/passwd and /etc/group); root when neither says."""
    user, _, group = config.user.partition(":")
    uid: int | None = run_as_user
    if uid is None and user:
        uid = int(user) if user.isdigit() else _lookup(rootfs / "etc/passwd", user, 2)
        if uid is None:
            raise DevError(f"image USER {config.user!r}: no such user in the image's /etc/passwd")
    uid = ROOT_UID if uid is None else uid
    gid: int | None = run_as_group
    if gid is None and group:
        gid = int(group) if group.isdigit() else _lookup(rootfs / "etc/group", group, 2)
    if gid is None and user and not user.isdigit():
        gid = _lookup(rootfs / "etc/passwd", user, 3)
    if gid is None:
        gid = uid if config.user and user.isdigit() and not group else ROOT_UID
    return uid, gid


def build_spec(
    *,
    image: str,
    rootfs: Path,
    argv: list[str],
    env: dict[str, str],
    mounts: list[Mount],
    uid: int,
    gid: int,
    groups: list[int] | None = None,
    cwd: str = "/",
    readonly_root: bool = True,
    termination_log_host: Path | None = None,
) -> dict[str, Any]:
    """What chroot.py needs to start the container."""
    if not argv:
        raise DevError(f"image {image}: nothing to run (no command, no ENTRYPOINT or CMD)")
    return {
        "image": image,
        "root": str(rootfs),
        "argv": argv,
        "env": env,
        "mounts": [m.to_spec() for m in mounts],
        "uid": uid,
        "gid": gid,
        "groups": list(groups or []),
        "cwd": cwd or "/",
        "readonly_root": readonly_root,
        "termination_log_host": str(termination_log_host) if termination_log_host else "",
    }


def launcher_argv(spec_file: Path) -> list[str]:
    """This machine's Python (the dev tooling's) runs the launcher; the container's own
    programs run after the chroot. -I: nothing of the container's env reaches the launcher."""
    return [sys.executable, "-I", "-m", "dflash_dev.images.chroot", str(spec_file)]


@dataclass
class ImageRun:
    """The result of `run_in_image`."""

    returncode: int
    stdout: str
    stderr: str
    argv: list[str] = field(default_factory=list)


def run_in_image(
    engine: Engine,
    image: str,
    command: list[str],
    *,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    mounts: list[Mount] | None = None,
    readonly_root: bool = True,
    tmp: bool = True,
    run_as_user: int | None = None,
    timeout: float = 300.0,
) -> ImageRun:
    """Run one command in a fresh container of `image`, as the image's user (or
    `run_as_user`), with a read-only root and a tmpfs at /tmp, and return its output."""
    config = image_config(engine, image)
    rootfs = create_rootfs(engine, image, f"run-{uuid.uuid4().hex[:12]}")
    try:
        uid, gid = resolve_user(config, rootfs.path, run_as_user, None)
        argv = build_command(config, command, args or [])
        tmpfs = [Mount("/tmp", tmpfs=True)] if tmp else []  # noqa: S108 - the container's /tmp
        all_mounts = [*tmpfs, *(mounts or [])]
        spec = build_spec(
            image=image, rootfs=rootfs.path, argv=argv, env={**config.env, **(env or {})},
            mounts=all_mounts, uid=uid, gid=gid, cwd=config.working_dir or "/",
            readonly_root=readonly_root,
        )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="dflash-image-run-") as folder:
            spec_file = Path(folder) / "spec.json"
            spec_file.write_text(json.dumps(spec))
            result = subprocess.run(
                launcher_argv(spec_file), capture_output=True, text=True, timeout=timeout,
                check=False, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        return ImageRun(result.returncode, result.stdout, result.stderr, argv)
    finally:
        remove_rootfs(engine, rootfs.name)
