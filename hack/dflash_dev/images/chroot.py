"""The container's first process: `python -I -m dflash_dev.images.chroot SPEC.json`.

Run as root, it enters a private mount namespace, binds the container's root filesystem, its
volumes, /proc, /sys and a minimal /dev, makes the root read-only when asked, chroots, drops
to the container's user and groups, and execs the container's command with its environment.
There is no PID or network namespace: the process shares this machine's network (the pod IPs
are loopback addresses) and its process table. The spec is written by `launch.py`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
# kubelet reports a container that cannot start with 128 (StartError).
START_ERROR_EXIT_CODE = 128
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {source} -> {target}",
    )


def _bind(source: str, target: str, readonly: bool) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    if readonly:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


MAX_SYMLINKS = 40


def resolve_in_root(root: Path, path: str) -> Path:
    """`path` inside the root filesystem at `root`, its symlinks resolved as the container sees
    them: an absolute link restarts at `root`, `..` stops at it (runc's securejoin). Debian's
    /var/run -> /run is why: followed on this machine, it would lead out of the image."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    current = root
    seen = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent if current != root else root
            continue
        candidate = current / part
        if candidate.is_symlink():
            seen += 1
            if seen > MAX_SYMLINKS:
                raise OSError(f"too many symlinks resolving {path} in {root}")
            link = str(candidate.readlink())
            if link.startswith("/"):
                current = root
            parts = [p for p in link.split("/") if p not in ("", ".")] + parts
            continue
        current = candidate
    return current


def _target(root: Path, path: str, is_file: bool) -> str:
    """The mount point of `path` inside `root` (symlinks resolved inside it), created as an
    empty dir or file when missing."""
    target = resolve_in_root(root, path)
    if is_file:
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.touch()
    else:
        target.mkdir(parents=True, exist_ok=True)
    return str(target)


def _fail(spec: dict[str, Any], message: str) -> None:
    sys.stderr.write(f"{message}\n")
    log = spec.get("termination_log_host")
    if log:
        with contextlib.suppress(OSError):
            Path(log).write_text(message)
    os._exit(START_ERROR_EXIT_CODE)


def enter(spec: dict[str, Any]) -> None:
    """Set up the container's filesystem view, then exec its command (never returns)."""
    root = Path(spec["root"])
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _bind(str(root), str(root), readonly=False)  # a mount point of its own, to make it read-only
    _bind("/proc", _target(root, "/proc", False), readonly=False)
    _bind("/sys", _target(root, "/sys", False), readonly=True)
    dev = _target(root, "/dev", False)
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=65536k")
    for device in DEVICES:
        if Path(f"/dev/{device}").exists():
            _bind(f"/dev/{device}", _target(root, f"/dev/{device}", True), readonly=False)
    shm = _target(root, "/dev/shm", False)  # noqa: S108 - the container's own /dev/shm
    _mount("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for mount in spec["mounts"]:
        source = mount["source"]
        target = _target(
            root, mount["target"], Path(source).is_file() and mount.get("kind") != "tmpfs"
        )
        if mount.get("kind") == "tmpfs":
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        else:
            _bind(source, target, bool(mount.get("readonly")))
    cwd = spec.get("cwd") or "/"
    _target(root, cwd, False)
    if spec.get("readonly_root"):
        _mount(None, str(root), None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    os.chroot(root)
    os.chdir(cwd)
    uid, gid = int(spec["uid"]), int(spec["gid"])
    os.setgroups([gid, *(int(g) for g in spec.get("groups") or [])])
    os.setgid(gid)
    os.setuid(uid)
    # A change of credentials clears the parent-death signal: set it again, so the container
    # still dies with the executor's worker (as setpriv --pdeathsig arranged before).
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    env = {str(k): str(v) for k, v in spec["env"].items()}
    argv = [str(a) for a in spec["argv"]]
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606 - the container's command, as argv
    except OSError as exc:
        if "/" in argv[0]:
            _fail(spec, f'exec: "{argv[0]}": {exc.strerror} (in image {spec.get("image")})')
        _fail(
            spec,
            f'exec: "{argv[0]}": executable file not found in $PATH (in image {spec.get("image")})',
        )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -I -m dflash_dev.images.chroot SPEC.json\n")
        sys.exit(2)
    spec = json.loads(Path(args[0]).read_text())
    try:
        enter(spec)
    except OSError as exc:
        _fail(spec, f"the container could not start: {exc}")


if __name__ == "__main__":
    main()
