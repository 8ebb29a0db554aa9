"""`make plugin`: the kubectl plugin as one file, `dist/kubectl-dflash` (a Python zipapp), and
`dist/kubectl-dflash.tar.gz` (it and LICENSE) for krew. `plugin_bootstrap.py` is its __main__.

The plugin's packages are pure Python except pydantic-core, so the file carries the pure ones
once and a pydantic-core build per target (CPython version x OS x CPU), all pinned by uv.lock;
at first run the bootstrap unpacks the matching set into a user cache. Deterministic: the same
inputs give the same bytes (fixed timestamps, sorted entries), so the sha256 is reproducible.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .paths import REPO_ROOT

# The operator's dependencies the plugin does not import: kopf and prometheus-client are the
# operator's; aiohttp is the kubernetes client's asyncio flavour (the plugin uses the sync one).
NOT_IMPORTED = ("kopf", "prometheus-client", "aiohttp")
# Folders of those packages the plugin never imports: the asyncio client (half of kubernetes'
# 41 MB; it needs the aiohttp left out above).
UNUSED_FOLDERS = ("kubernetes/aio",)
# The one compiled dependency: shipped per target, unpacked next to the pure packages.
NATIVE_DISTRIBUTION = "pydantic-core"
NATIVE_PACKAGE = "pydantic_core"
# Compiled modules the pure packages carry only as accelerators, each with a pure fallback:
# PyYAML's libyaml binding and charset-normalizer's mypyc builds (md.py/cd.py stay).
OPTIONAL_ACCELERATORS = re.compile(r"^(yaml/_yaml|charset_normalizer/(md|cd)|[0-9a-f]+__mypyc)\.")
COMPILED_SUFFIXES = (".so", ".pyd", ".dylib")
# uv's --python-platform per bootstrap key (OS-CPU); krew's platforms are the same four.
PLATFORMS = {
    "linux-x86_64": "x86_64-manylinux_2_17",
    "linux-aarch64": "aarch64-manylinux_2_17",
    "macos-x86_64": "x86_64-apple-darwin",
    "macos-aarch64": "aarch64-apple-darwin",
}
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
# Only the plugin's part of the operator package (the API models and the CLI).
OPERATOR_PARTS = ("__init__.py", "version.py", "api", "cli")
SHEBANG = b"#!/usr/bin/env python3\n"
# Zip entries get one fixed time (the zip format's earliest) so builds are reproducible.
FIXED_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
ZIPAPP_NAME = "kubectl-dflash"
TARBALL_NAME = "kubectl-dflash.tar.gz"


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Built:
    zipapp: Path
    tarball: Path
    targets: list[str]


def _uv() -> str:
    found = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
    if not Path(found).exists():
        raise BuildError("uv is not installed: run make uv")
    return found


def _run(*args: str) -> str:
    result = subprocess.run(args, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if result.returncode != 0:
        raise BuildError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def locked_requirements() -> list[str]:
    """`name==version` of every package the plugin needs, exactly as uv.lock pins them."""
    prune = [option for name in NOT_IMPORTED for option in ("--prune", name)]
    text = _run(
        _uv(), "export", "--package", "dflash-operator", "--frozen", "--no-hashes",
        "--no-emit-workspace", "--no-dev", "--no-header", "--no-annotate", *prune,
    )  # fmt: skip
    return [line.strip() for line in text.splitlines() if re.match(r"^[A-Za-z0-9]", line)]


def _install(target: Path, requirements: Iterable[str], python: str, platform: str) -> None:
    _run(
        _uv(), "pip", "install", "--quiet", "--target", str(target), "--python-version", python,
        "--python-platform", platform, "--only-binary", ":all:", "--no-config", *requirements,
    )  # fmt: skip


def _strip_compiled(site: Path) -> None:
    """Pure packages keep no compiled files: they would load on one platform only."""
    for path in sorted(site.rglob("*")):
        if not path.is_file() or not path.name.endswith(COMPILED_SUFFIXES):
            continue
        relative = path.relative_to(site).as_posix()
        if not OPTIONAL_ACCELERATORS.match(relative):
            raise BuildError(
                f"{relative} is compiled and has no known pure-Python fallback: the plugin "
                f"cannot carry it once for every platform. Ship it per target like "
                f"{NATIVE_DISTRIBUTION} (plugin_zipapp.py) or avoid the dependency"
            )
        path.unlink()


def _copy_operator(site: Path) -> None:
    package = REPO_ROOT / "operator" / "dflash_operator"
    for part in OPERATOR_PARTS:
        source, destination = package / part, site / "dflash_operator" / part
        if source.is_dir():
            shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    # The distribution's metadata, so that `kubectl dflash --version` reads the real version
    # (dflash_operator/version.py asks importlib.metadata, which finds it on the site path).
    release = (REPO_ROOT / "VERSION").read_text().strip()
    metadata = site / f"dflash_operator-{release}.dist-info" / "METADATA"
    metadata.parent.mkdir(parents=True, exist_ok=True)
    metadata.write_text(f"Metadata-Version: 2.1\nName: dflash-operator\nVersion: {release}\n")


def stage(work: Path, pythons: Iterable[str], platforms: Iterable[str]) -> list[str]:
    """work/site (pure packages), work/native/<key> (pydantic-core per target); the keys."""
    requirements = locked_requirements()
    native = [r for r in requirements if r.startswith(f"{NATIVE_DISTRIBUTION}==")]
    if len(native) != 1:
        raise BuildError(f"uv.lock pins no single {NATIVE_DISTRIBUTION}: {native}")
    pure = [r for r in requirements if r not in native]
    site = work / "site"
    # Exact pins with --no-deps: the lock decides every version, nothing else is resolved.
    _install(site, ["--no-deps", *pure], python="3.11", platform=PLATFORMS["linux-x86_64"])
    for unused in ("bin", *UNUSED_FOLDERS):
        shutil.rmtree(site / unused, ignore_errors=True)
    _strip_compiled(site)
    _copy_operator(site)
    keys = []
    for python in pythons:
        for name in platforms:
            key = f"cp{python.replace('.', '')}-{name}"
            folder = work / "native" / key
            _install(folder, ["--no-deps", *native], python=python, platform=PLATFORMS[name])
            keys.append(key)
    return keys


def _entries(work: Path) -> list[tuple[str, bytes]]:
    entries = []
    for path in sorted(work.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            entries.append((path.relative_to(work).as_posix(), path.read_bytes()))
    return entries


def write_zipapp(work: Path, keys: list[str], destination: Path) -> None:
    entries = _entries(work)
    digest = hashlib.sha256()
    for name, data in entries:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    bootstrap = (Path(__file__).parent / "plugin_bootstrap.py").read_bytes()
    digest.update(bootstrap)
    entries += [
        ("__main__.py", bootstrap),
        ("BUILD_ID", digest.hexdigest()[:16].encode()),
        ("TARGETS", "\n".join(keys).encode() + b"\n"),
    ]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in sorted(entries):
            info = zipfile.ZipInfo(name, FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_bytes(SHEBANG + buffer.getvalue())
    destination.chmod(0o755)


def write_tarball(zipapp: Path, destination: Path) -> None:
    """The zipapp and LICENSE at the top level, as the krew manifest's `files` expect."""
    members = [(zipapp, ZIPAPP_NAME, 0o755), (REPO_ROOT / "LICENSE", "LICENSE", 0o644)]
    buffer = io.BytesIO()
    # mtime=0 in the gzip header and in each member: reproducible bytes.
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, name, mode in members:
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    destination.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0))


def build(
    dist: Path, work: Path, pythons: Iterable[str] = PYTHONS, platforms: Iterable[str] = PLATFORMS
) -> Built:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    keys = stage(work, pythons, platforms)
    zipapp = dist / ZIPAPP_NAME
    write_zipapp(work, keys, zipapp)
    tarball = dist / TARBALL_NAME
    write_tarball(zipapp, tarball)
    return Built(zipapp, tarball, keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.plugin_zipapp", description=__doc__)
    parser.add_argument("--dist", type=Path, default=REPO_ROOT / "dist")
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "build" / "plugin")
    parser.add_argument(
        "--python", action="append", choices=PYTHONS, help="CPython versions (default: all)"
    )
    parser.add_argument(
        "--platform", action="append", choices=list(PLATFORMS), help="OS-CPU (default: all)"
    )
    args = parser.parse_args(argv)
    try:
        built = build(args.dist, args.work, args.python or PYTHONS, args.platform or PLATFORMS)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    size = built.zipapp.stat().st_size / 1e6
    sha = hashlib.sha256(built.tarball.read_bytes()).hexdigest()
    print(f"{built.zipapp} ({size:.1f} MB; pydantic-core for {', '.join(built.targets)})")
    print(f"{built.tarball} sha256 {sha}")
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
