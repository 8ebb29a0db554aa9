"""The version-floor environment is cached once per version set and shared by every checkout:
its .pth must name no checkout's .venv (a removed worktree's path broke `make
test-version-floor` for every later checkout), and reach the caller's through BASE_SITE_VAR."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dflash_dev.floor_env import BASE_PTH, BASE_PTH_LINE, BASE_SITE_VAR


def _python_with_pth(tmp_path: Path, base: Path | None) -> list[str]:
    """sys.path of a fresh interpreter whose site dir holds the floor's .pth."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / BASE_PTH).write_text(BASE_PTH_LINE)
    env = {"PATH": "/usr/bin:/bin"}
    if base is not None:
        env[BASE_SITE_VAR] = str(base)
    code = f"import site, sys; site.addsitedir({str(site)!r}); print('\\n'.join(sys.path))"
    result = subprocess.run(
        [sys.executable, "-I", "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.splitlines()


def test_the_pth_names_no_checkout() -> None:
    assert "/" not in BASE_PTH_LINE.replace("\\n", "")
    assert BASE_PTH_LINE.startswith("import ") and BASE_PTH_LINE.count("\n") == 1


def test_the_callers_venv_and_its_own_pth_files_are_added(tmp_path: Path) -> None:
    base = tmp_path / "venv-site"
    editable = tmp_path / "workspace-package"
    base.mkdir()
    editable.mkdir()
    (base / "editable.pth").write_text(f"{editable}\n")
    path = _python_with_pth(tmp_path, base)
    assert str(base) in path and str(editable) in path


def test_without_the_variable_nothing_is_added(tmp_path: Path) -> None:
    path = _python_with_pth(tmp_path, None)
    assert not any("venv-site" in entry for entry in path)
