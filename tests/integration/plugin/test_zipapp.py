"""The single-file plugin (`make plugin`): built as a release builds it, then run by Pythons
that have none of the repository's packages (-I -S: no site-packages at all), directly through
its shebang, and by kubectl from PATH, against the real control plane."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dflash_dev import binaries
from dflash_dev.paths import REPO_ROOT
from dflash_dev.plugin_zipapp import PLATFORMS, PYTHONS, Built, build

VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """Every target, as `make plugin` builds it (wheels come from uv's cache after the first)."""
    root = tmp_path_factory.mktemp("plugin")
    yield build(root / "dist", root / "work")


def isolated_env(cache: Path) -> dict[str, str]:
    """PATH without the repository's virtualenv, and a fresh unpack cache."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != VENV_BIN]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return {**env, "PATH": os.pathsep.join(path), "KUBECTL_DFLASH_CACHE_DIR": str(cache)}


def _runs_as(python: str, version: str) -> bool:
    check = "import sys; print('%d.%d' % sys.version_info[:2])"
    result = subprocess.run([python, "-I", "-S", "-c", check], capture_output=True, text=True)
    return result.returncode == 0 and result.stdout.strip() == version


def system_pythons() -> list[str]:
    """One interpreter per supported version found outside the venv (PATH, pyenv's versions)."""
    path = isolated_env(Path())["PATH"]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = []
    for version in PYTHONS:
        candidates = [shutil.which(f"python{version}", path=path)]
        candidates += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))
        usable = [c for c in candidates if c and _runs_as(c, version)]
        found += usable[:1]
    return found


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, check=False, timeout=120)


def test_the_zipapp_carries_pydantic_core_for_every_target(built: Built) -> None:
    assert len(built.targets) == len(PYTHONS) * len(PLATFORMS)
    assert "cp311-linux-x86_64" in built.targets and "cp314-macos-aarch64" in built.targets
    assert built.zipapp.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert os.access(built.zipapp, os.X_OK)


@pytest.mark.parametrize("python", system_pythons() or ["none"])
def test_a_python_without_the_repos_packages_runs_help_and_a_real_command(
    python: str, built: Built, plugin: Any, tmp_path: Path
) -> None:
    if python == "none":
        pytest.skip("no python3.11+ outside the virtualenv on this machine")
    plugin.create_run("mid-training", "training")
    env = isolated_env(tmp_path / "cache")
    where = ["--kubeconfig", str(plugin.cluster.kubeconfig), "-n", plugin.namespace]

    helped = run(python, "-I", "-S", str(built.zipapp), "--help", env=env)
    versioned = run(python, "-I", "-S", str(built.zipapp), "--version", env=env)
    listed = run(python, "-I", "-S", str(built.zipapp), "list", *where, "-o", "name", env=env)
    status = run(python, "-I", "-S", str(built.zipapp), "status", "mid-training", *where, env=env)

    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: kubectl dflash")
    assert versioned.returncode == 0, versioned.stderr
    assert (REPO_ROOT / "VERSION").read_text().strip() in versioned.stdout, versioned.stdout
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "dflashrun.dflash.dev/mid-training\n"
    assert status.returncode == 0, status.stderr
    assert "Phase:       Training" in status.stdout
    # Unpacked once, for this Python only.
    (unpacked,) = (tmp_path / "cache").glob("*/cp3*")
    assert (unpacked / "native" / "pydantic_core").is_dir()


def test_kubectl_runs_the_zipapp_from_path_through_its_shebang(
    built: Built, plugin: Any, tmp_path: Path
) -> None:
    env = isolated_env(tmp_path / "cache")
    python3 = shutil.which("python3", path=env["PATH"])
    check = "import sys; print(sys.version_info >= (3, 11))"
    version = run(python3 or "python3", "-c", check, env=env)
    if version.stdout.strip() != "True":
        pytest.skip("python3 on PATH is older than 3.11")
    plugin.create_run("mid-training", "training")
    env["PATH"] = f"{built.zipapp.parent}{os.pathsep}{env['PATH']}"
    env["KUBECONFIG"] = str(plugin.cluster.kubeconfig)
    kubectl = str(binaries.cached_path("kubectl"))

    listed = run(kubectl, "plugin", "list", env=env)
    result = run(
        kubectl, "dflash", "list", "-n", plugin.namespace, "-o", "jsonpath={.items[0].status.phase}",
        env=env,
    )  # fmt: skip

    assert str(built.zipapp) in listed.stdout
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Training"


def test_the_krew_archive_holds_the_zipapp_and_the_license(built: Built, tmp_path: Path) -> None:
    with tarfile.open(built.tarball) as archive:
        archive.extractall(tmp_path, filter="data")
        names = sorted(archive.getnames())

    assert names == ["LICENSE", "kubectl-dflash"]
    assert (tmp_path / "kubectl-dflash").read_bytes() == built.zipapp.read_bytes()
    assert os.access(tmp_path / "kubectl-dflash", os.X_OK)


def test_a_platform_it_was_not_built_for_gets_a_clear_error_and_builds_are_reproducible(
    tmp_path: Path,
) -> None:
    # CPython 3.13 is outside the repository's Pythons (<3.13), so never the one running here.
    first = build(tmp_path / "a", tmp_path / "work-a", ["3.13"], ["linux-aarch64"])
    second = build(tmp_path / "b", tmp_path / "work-b", ["3.13"], ["linux-aarch64"])
    env = isolated_env(tmp_path / "cache")

    result = run(sys.executable, "-I", "-S", str(first.zipapp), "--help", env=env)

    assert (
        hashlib.sha256(first.tarball.read_bytes()).digest()
        == hashlib.sha256(second.tarball.read_bytes()).digest()
    )
    assert result.returncode == 1
    running = f"cp{sys.version_info[0]}{sys.version_info[1]}-"
    assert result.stderr.startswith(
        f"error: this kubectl-dflash has no compiled pydantic-core for {running}"
    )
    assert (
        "it carries: cp313-linux-aarch64. Install it as a Python package instead" in result.stderr
    )
    assert "Traceback" not in result.stderr
