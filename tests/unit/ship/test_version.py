"""One release version: every copy agrees with the VERSION file, the checker names a copy that
does not, `set` writes them all, and the operator reports what its package metadata says."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from dflash_dev import version as release
from dflash_dev.errors import DevError
from dflash_operator import config, main
from dflash_operator.runtime import kube
from dflash_operator.version import OPERATOR_VERSION, UNKNOWN_VERSION, installed_version

ROOT = Path(__file__).parents[3]
COPIES = release.build_copies()


def copy_version_files(target: Path) -> Path:
    for relative in {release.VERSION_FILE, *(copy.path for copy in COPIES)}:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / relative, target / relative)
    return target


def test_every_copy_of_the_version_agrees_with_the_version_file() -> None:
    assert release.find_mismatches(ROOT) == []


@pytest.mark.parametrize("copy", COPIES, ids=lambda c: f"{c.path}:{c.label}")
def test_the_checker_names_a_copy_that_disagrees(tmp_path: Path, copy: release.VersionCopy) -> None:
    root = copy_version_files(tmp_path)
    copy.write(root, "9.9.9")
    problems = release.find_mismatches(root)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{copy.path}: {copy.label} is '9.9.9'")
    assert f"make set-version VERSION={release.read_version(ROOT)}" in problems[0]


def test_the_checker_names_a_copy_whose_version_line_is_gone(tmp_path: Path) -> None:
    root = copy_version_files(tmp_path)
    chart = root / release.CHART
    chart.write_text(re.sub(r"^appVersion:.*\n", "", chart.read_text(), flags=re.M))
    expected = f"{release.CHART}: no appVersion found (expected {release.read_version(ROOT)})"
    assert release.find_mismatches(root) == [expected]


def test_set_version_writes_every_copy_and_nothing_else(tmp_path: Path) -> None:
    root = copy_version_files(tmp_path)
    old = release.read_version(ROOT)
    before = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    release.set_version("1.22.333", root)
    assert release.read_version(root) == "1.22.333"
    assert release.find_mismatches(root) == []
    for path, text in before.items():
        # Only version values change: the rest of every file is byte for byte the same.
        assert path.read_text().replace("1.22.333", old) == text, path


@pytest.mark.parametrize("bad", ["v0.2.0", "0.2", "0.2.0-rc.1", "0.02.0", "0.2.0\n1"])
def test_a_version_that_is_not_x_y_z_is_refused(tmp_path: Path, bad: str) -> None:
    root = copy_version_files(tmp_path)
    with pytest.raises(DevError, match="not a release version"):
        release.set_version(bad, root)
    assert release.find_mismatches(root) == []


def test_the_operator_reports_the_version_of_its_package_metadata() -> None:
    assert release.read_version(ROOT) == OPERATOR_VERSION
    assert f"dflash-operator/{OPERATOR_VERSION}" == kube.USER_AGENT
    assert config.DEFAULT_REGEN_IMAGE.endswith(f"/dflash-regen:{OPERATOR_VERSION}")
    assert config.DEFAULT_TRAINER_IMAGE.endswith(f"/dflash-trainer:{OPERATOR_VERSION}")


def test_the_operator_prints_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.cli(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"dflash-operator {OPERATOR_VERSION}\n"


def test_no_operator_source_hard_codes_the_version() -> None:
    version = re.escape(release.read_version(ROOT))
    hard_coded = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "operator" / "dflash_operator").rglob("*.py")
        if re.search(rf"[\"':/]{version}[\"']", path.read_text())
    ]
    assert hard_coded == []


def test_the_makefile_tags_images_with_the_version_file() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "RELEASE_VERSION := $(shell cat $(CURDIR)/VERSION" in makefile
    assert re.search(r"^IMAGE_TAG \?= \$\(RELEASE_VERSION\)$", makefile, re.M)


def test_sources_without_package_metadata_report_a_version_that_is_still_an_image_tag() -> None:
    assert installed_version("dflash-no-such-distribution") == UNKNOWN_VERSION
    image = f"ghcr.io/dflash-dev/dflash-regen:{UNKNOWN_VERSION}"
    assert config.OperatorConfig(regen_image=image).regen_image == image
