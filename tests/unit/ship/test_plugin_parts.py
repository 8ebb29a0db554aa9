"""The kubectl plugin's zipapp carries only part of the operator package (OPERATOR_PARTS).
Every `dflash_operator` module that those parts import must be among them, or the plugin dies
with ModuleNotFoundError on a user's machine while every test in the workspace passes."""

from __future__ import annotations

import ast
from pathlib import Path

from dflash_dev.paths import REPO_ROOT
from dflash_dev.plugin_zipapp import OPERATOR_PARTS

PACKAGE = REPO_ROOT / "operator" / "dflash_operator"


def _carried_files() -> list[Path]:
    files: list[Path] = []
    for part in OPERATOR_PARTS:
        path = PACKAGE / part
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def _imported_operator_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        modules |= {n for n in names if n == "dflash_operator" or n.startswith("dflash_operator.")}
    return modules


def _is_carried(module: str) -> bool:
    parts = module.split(".")[1:]
    if not parts:
        return True
    return parts[0] in OPERATOR_PARTS or f"{parts[0]}.py" in OPERATOR_PARTS


def test_every_operator_module_the_plugin_imports_is_carried_in_the_zipapp() -> None:
    missing = {
        f"{path.relative_to(REPO_ROOT)} imports {module}"
        for path in _carried_files()
        for module in _imported_operator_modules(path)
        if not _is_carried(module)
    }
    assert not missing, sorted(missing)


def test_the_check_sees_a_module_left_out() -> None:
    assert not _is_carried("dflash_operator.runtime.kube")
    assert _is_carried("dflash_operator.version")
    assert _is_carried("dflash_operator.cli.parser")
