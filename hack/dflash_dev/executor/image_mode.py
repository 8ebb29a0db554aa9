"""Image mode (`--from-images`): a pod's container runs from its image's root filesystem, as a
container runtime would run it, instead of as a process of this machine's venv.

Each pod gets a working container of its image (rootfs.py: the image's layers read-only, an
upper layer of its own), removed with the pod. The chroot launcher binds the pod's volumes at
their mountPaths, the termination-message file at its path, /tmp and the rest of the pod's
mounts, makes the root read-only when the container asks (readOnlyRootFilesystem), and runs
the command as the pod's runAsUser (else the image's USER) with the image's env, working dir
and entrypoint, then the pod's command, args and env. No path is rewritten: the paths are real.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_dev.images.engine import Engine, ImageConfig, image_config
from dflash_dev.images.launch import (
    Mount,
    build_command,
    build_spec,
    launcher_argv,
    resolve_user,
)
from dflash_dev.images.rootfs import NAME_PREFIX, create_rootfs, list_rootfs, remove_rootfs

from .env import expand
from .errors import PodConfigError, PodStartError
from .process import CONTAINER_ENV
from .sandbox import Sandbox

SPEC_FILE = "container.json"
# The image's PATH when it sets none (the OCI runtime's default).
DEFAULT_IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageUnavailableError(PodConfigError):
    """The image is not in local storage: the pod waits, as kubelet waits on a failed pull."""

    reason = "ErrImagePull"


@dataclass
class ImageStart:
    """What one start of a pod's container from its image needs, besides the argv."""

    image: str
    config: ImageConfig
    rootfs: Path
    uid: int
    gid: int
    groups: list[int]
    readonly_root: bool
    cwd: str


def rootfs_name(instance: str, uid: str) -> str:
    """The working container of a pod: one per pod uid, per executor instance."""
    return f"{instance}-{uid}"


def _security(
    pod: dict[str, Any], container: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    return (pod["spec"].get("securityContext") or {}), (container.get("securityContext") or {})


def prepare_image_start(
    engine: Engine, instance: str, pod: dict[str, Any], sandbox: Sandbox
) -> ImageStart:
    """The pod's image config, its root filesystem (created on first use) and its user."""
    container = pod["spec"]["containers"][0]
    image = str(container.get("image") or "")
    try:
        config = image_config(engine, image)
    except Exception as exc:  # DevError: not in local storage
        raise ImageUnavailableError(f'Failed to pull image "{image}": {exc}') from None
    if sandbox.rootfs is None:
        rootfs = create_rootfs(engine, image, rootfs_name(instance, pod["metadata"]["uid"]))
        sandbox.rootfs = rootfs.path
    pod_security, security = _security(pod, container)
    run_as_user = security.get("runAsUser", pod_security.get("runAsUser"))
    run_as_group = security.get("runAsGroup", pod_security.get("runAsGroup"))
    uid, gid = resolve_user(config, sandbox.rootfs, run_as_user, run_as_group)
    if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) and uid == 0:
        raise PodConfigError(
            "container has runAsNonRoot and image will run as root (pod: "
            f'"{pod["metadata"]["name"]}", container: {container.get("name")})'
        )
    groups = [int(pod_security["fsGroup"])] if pod_security.get("fsGroup") is not None else []
    groups += [int(g) for g in pod_security.get("supplementalGroups") or []]
    return ImageStart(
        image=image,
        config=config,
        rootfs=sandbox.rootfs,
        uid=uid,
        gid=gid,
        groups=groups,
        readonly_root=bool(security.get("readOnlyRootFilesystem")),
        cwd=str(container.get("workingDir") or config.working_dir or "/"),
    )


def build_image_env(
    config: ImageConfig, runtime: dict[str, str], own: dict[str, str]
) -> dict[str, str]:
    """The image's env, then what the runtime adds (HOSTNAME, the API's address), then the
    container's own (which wins)."""
    return {"PATH": DEFAULT_IMAGE_PATH, **config.env, **runtime, **own}


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Volumes and the termination-message file belong to the container's user (kubelet gives
    emptyDirs mode 0777 and projected files the pod's fsGroup; owning them is the same here)."""
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.lchown(Path(folder) / name, uid, gid)
    os.lchown(root, uid, gid)


def image_argv(
    start: ImageStart, container: dict[str, Any], env: dict[str, str], sandbox: Sandbox
) -> list[str]:
    """Write the launch spec into the sandbox and return the launcher's argv.

    Raises PodStartError when the image has nothing to run."""
    command = [expand(str(c), env) for c in container.get("command") or []]
    args = [expand(str(a), env) for a in container.get("args") or []]
    argv = build_command(start.config, command, args)
    if not argv:
        raise PodStartError(
            f"container {container.get('name')!r}: no command, and image {start.image} has no "
            "ENTRYPOINT or CMD"
        )
    mounts = [Mount(target, str(local)) for target, local in sandbox.mounts.items()]
    for mount in container.get("volumeMounts") or []:
        path = mount.get("mountPath")
        if mount.get("readOnly") and path in sandbox.mounts:
            mounts = [Mount(m.target, m.source, True) if m.target == path else m for m in mounts]
    mounts.append(Mount(sandbox.termination_path, str(sandbox.termination_log)))
    for folder in ("volumes",):
        if (sandbox.root / folder).is_dir():
            _chown_tree(sandbox.root / folder, start.uid, start.gid)
    os.lchown(sandbox.termination_log, start.uid, start.gid)
    spec = build_spec(
        image=start.image, rootfs=start.rootfs, argv=argv, env=env, mounts=mounts,
        uid=start.uid, gid=start.gid, groups=start.groups, cwd=start.cwd,
        readonly_root=start.readonly_root, termination_log_host=sandbox.termination_log,
    )  # fmt: skip
    spec_file = sandbox.root / SPEC_FILE
    spec_file.write_text(json.dumps(spec))
    return launcher_argv(spec_file)


def image_launcher_env(env: dict[str, str]) -> dict[str, str]:
    """The launcher's own environment: the container marker (so the executor finds and signals
    every process of the container) and a plain PATH."""
    return {CONTAINER_ENV: env[CONTAINER_ENV], "PATH": DEFAULT_IMAGE_PATH}


def release_rootfs(engine: Engine, instance: str, uid: str) -> None:
    remove_rootfs(engine, NAME_PREFIX + rootfs_name(instance, uid))


def remove_orphan_rootfs(engine: Engine, instance: str, live_uids: set[str]) -> int:
    """Working containers of this executor instance whose pod is gone (a crash left them)."""
    prefix = NAME_PREFIX + rootfs_name(instance, "")
    removed = 0
    for name in list_rootfs(engine):
        if name.startswith(prefix) and name.removeprefix(prefix) not in live_uids:
            remove_rootfs(engine, name)
            removed += 1
    return removed
