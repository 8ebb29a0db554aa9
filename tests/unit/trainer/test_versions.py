"""The trainer's torch / transformers floors: equal to trainer/pyproject.toml's lower bounds,
and a stage started on anything older stops at once, naming what is installed and needed."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from dflash_trainer import versions
from dflash_trainer.versions import (
    MIN_TORCH,
    MIN_TRANSFORMERS,
    VersionError,
    build_version_problems,
    release_of,
    require_supported_versions,
)

REPO = Path(__file__).resolve().parents[3]


def pyproject_floor(name: str) -> tuple[int, int]:
    deps = tomllib.loads((REPO / "trainer" / "pyproject.toml").read_text())["project"]
    for requirement in deps["dependencies"]:
        match = re.match(rf"^{name}>=(\d+)\.(\d+)", requirement)
        if match:
            return int(match.group(1)), int(match.group(2))
    raise AssertionError(f"no {name}>= in trainer/pyproject.toml")


def test_the_floors_are_the_pyprojects_lower_bounds() -> None:
    assert pyproject_floor("torch") == MIN_TORCH == (2, 11)
    assert pyproject_floor("transformers") == MIN_TRANSFORMERS == (5, 17)


@pytest.mark.parametrize(
    ("torch_version", "transformers_version", "problems"),
    [
        ("2.11.0+cu130", "5.17.0", []),
        ("2.15.0+cu132", "5.24.0", []),
        ("2.10.1", "5.17.0", ["torch 2.10.1 (needs >= 2.11)"]),
        ("2.11.0", "5.16.2", ["transformers 5.16.2 (needs >= 5.17)"]),
        (
            "1.13.1",
            "4.57.0",
            ["torch 1.13.1 (needs >= 2.11)", "transformers 4.57.0 (needs >= 5.17)"],
        ),
        (None, "5.17.0.dev0", []),
    ],
)
def test_versions_below_the_floor_are_named(
    torch_version: str | None, transformers_version: str, problems: list[str]
) -> None:
    assert build_version_problems(torch_version, transformers_version) == problems


def test_a_stage_on_an_old_stack_refuses_to_start_naming_the_versions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch
    import transformers

    monkeypatch.setattr(torch, "__version__", "2.10.0+cu128")
    monkeypatch.setattr(transformers, "__version__", "5.16.0")
    with pytest.raises(VersionError) as caught:
        require_supported_versions()
    message = str(caught.value)
    assert "torch 2.10.0+cu128 (needs >= 2.11)" in message
    assert "transformers 5.16.0 (needs >= 5.17)" in message
    assert "\n" not in message


def test_the_train_command_exits_2_with_the_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import transformers
    from dflash_trainer.train.__main__ import main

    monkeypatch.setattr(transformers, "__version__", "5.10.0")
    config = REPO / "trainer" / "configs" / "debug.yaml"
    result = tmp_path / "result.json"
    code = main(["--config", str(config), "--termination-log", str(result),
                 f"run_root={tmp_path}"])  # fmt: skip
    assert code == 2
    assert "transformers 5.10.0 (needs >= 5.17)" in result.read_text()


def test_this_environment_is_supported() -> None:
    require_supported_versions()
    assert release_of("2.16.0a0") == (2, 16)
    assert release_of(__import__("torch").__version__) >= versions.MIN_TORCH


def test_ci_tests_the_floor_itself() -> None:
    """`make test-version-floor` runs at exactly the floors (dflash_dev.floor_env)."""
    from dflash_dev.floor_env import FLOOR

    assert release_of(FLOOR["torch"]) == MIN_TORCH
    assert release_of(FLOOR["transformers"]) == MIN_TRANSFORMERS
    makefile = (REPO / "Makefile").read_text()
    assert "test-version-floor" in makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
