"""`__main__.py` of the single-file `kubectl-dflash` (built by `plugin_zipapp.py`): unpacks
the vendored packages once per build into a user cache, with the compiled pydantic-core that
matches this Python and platform, then runs the plugin. Standard library only.

Any Python from 3.7 on can run this far, so an old Python is told which one is needed.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import NoReturn

MINIMUM_PYTHON = (3, 11)
BUILD_ID_FILE = "BUILD_ID"
TARGETS_FILE = "TARGETS"
SITE = "site/"
NATIVE = "native/"
# kubectl (>= 1.26) runs `kubectl_complete-<plugin>` to complete a plugin's arguments; a link of
# that name to this file answers it.
COMPLETE_PREFIX = "kubectl_complete-"
INSTEAD = "Install it as a Python package instead: uv tool install dflash-operator (or pipx)."


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    sys.exit(1)


def target_key() -> str:
    """'cp312-linux-x86_64', 'cp313-macos-aarch64': the pydantic-core build this Python needs."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = {"darwin": "macos"}.get(sys.platform, sys.platform)
    return f"cp{sys.version_info[0]}{sys.version_info[1]}-{system}-{machine}"


def cache_root() -> Path:
    configured = os.environ.get("KUBECTL_DFLASH_CACHE_DIR")
    if configured:
        return Path(configured)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "kubectl-dflash"
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "kubectl-dflash"


def unpack(archive: zipfile.ZipFile, build_id: str, key: str) -> Path:
    """<cache>/<build id>/<key>/{site,native}; extracted into a temp folder, then renamed, so
    a concurrent or interrupted first run never leaves a half-filled folder in use."""
    destination = cache_root() / build_id / key
    if destination.is_dir():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=destination.parent))
    native = f"{NATIVE}{key}/"
    try:
        for member in archive.infolist():
            name = member.filename
            if name.endswith("/"):
                continue
            if name.startswith(SITE):
                target = staging / "site" / name[len(SITE) :]
            elif name.startswith(native):
                target = staging / "native" / name[len(native) :]
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, target.open("wb") as sink:
                shutil.copyfileobj(source, sink)
        try:
            staging.rename(destination)
        except OSError:
            if not destination.is_dir():  # another first run won the race: use its copy
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination


def main() -> None:
    if sys.version_info[:2] < MINIMUM_PYTHON:
        needed = ".".join(str(part) for part in MINIMUM_PYTHON)
        fail(
            f"kubectl-dflash needs Python {needed} or newer; {sys.executable} is Python "
            f"{platform.python_version()}. Run it with a newer one (python3.12 kubectl-dflash "
            f"...), or {INSTEAD}"
        )
    archive_path = Path(__file__).resolve().parent
    with zipfile.ZipFile(archive_path) as archive:
        build_id = archive.read(BUILD_ID_FILE).decode().strip()
        targets = archive.read(TARGETS_FILE).decode().split()
        key = target_key()
        if key not in targets:
            fail(
                f"this kubectl-dflash has no compiled pydantic-core for {key} (Python "
                f"{platform.python_version()} on {sys.platform} {platform.machine()}); it "
                f"carries: {', '.join(targets)}. {INSTEAD}"
            )
        try:
            root = unpack(archive, build_id, key)
        except OSError as exc:
            fail(
                f"cannot unpack kubectl-dflash into {cache_root()}: {exc}. Set "
                "KUBECTL_DFLASH_CACHE_DIR to a writable folder"
            )
    sys.path[0:0] = [str(root / "native"), str(root / "site")]
    from dflash_operator.cli.main import complete_main
    from dflash_operator.cli.main import main as plugin_main

    completing = Path(sys.argv[0]).name.startswith(COMPLETE_PREFIX)
    sys.exit(complete_main() if completing else plugin_main())


if __name__ == "__main__":
    main()
