"""images/regen/requirements.txt against the real package index (PyPI): it resolves together
with vllm==<the Dockerfile's FROM version> with no conflict, it is what `make
regen-requirements` gives today from uv.lock (reproducible: uv resolves as of a fixed date),
and the lock's own pins would not resolve with that vLLM (why the file exists)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from dflash_dev import regen_requirements as rr
from dflash_dev.paths import REPO_ROOT


def compile_with_vllm(requirements: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    inputs = tmp_path / "check.in"
    inputs.write_text(f"-r {requirements}\nvllm=={rr.vllm_version()}\n")
    return subprocess.run(
        [rr.uv_binary(), "pip", "compile", str(inputs), "--python-version", rr.PYTHON_VERSION,
         "--python-platform", rr.PLATFORM, "--exclude-newer", rr.EXCLUDE_NEWER,
         "--output-file", str(tmp_path / "out.txt"), "--quiet"],
        capture_output=True, text=True, check=False, cwd=REPO_ROOT,
    )  # fmt: skip


def test_the_file_resolves_with_the_dockerfiles_vllm_and_changes_nothing(tmp_path: Path) -> None:
    result = compile_with_vllm(rr.REQUIREMENTS, tmp_path)
    assert result.returncode == 0, result.stderr
    assert rr.pins((tmp_path / "out.txt").read_text()) == rr.pins(rr.REQUIREMENTS.read_text())


def test_the_locks_own_pins_conflict_with_that_vllm(tmp_path: Path) -> None:
    """The check can fail: uv.lock's transformers 5.24.0 / torch 2.15.0 with vllm 0.33.0."""
    lock = tmp_path / "lock.txt"
    lock.write_text("\n".join(rr.lock_pins().values()) + "\n")
    result = compile_with_vllm(lock, tmp_path)
    assert result.returncode != 0
    assert "No solution found" in result.stderr or "unsatisfiable" in result.stderr


def test_the_file_is_current_with_the_lock_and_the_dockerfile() -> None:
    assert rr.main(["--check"]) == 0
