"""The krew manifest: the checked-in template has the shape krew needs (with its placeholders),
and `python -m dflash_dev.krew_manifest` fills it for a release and refuses bad input."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev import krew_manifest
from dflash_dev.krew_manifest import TEMPLATE, fill, main, manifest_problems
from dflash_dev.plugin_zipapp import write_tarball

URL = "https://github.com/dflash-dev/dflash-operator/releases/download/v0.2.0/kubectl-dflash.tar.gz"


def template() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(TEMPLATE.read_text())
    return data


def test_the_template_is_a_krew_plugin_with_its_placeholders() -> None:
    assert manifest_problems(template(), filled=False) == []


def test_the_template_selects_one_platform_entry_per_os_and_arch_and_installs_the_zipapp() -> None:
    (platform,) = template()["spec"]["platforms"]

    assert platform["bin"] == "kubectl-dflash"
    assert {entry["from"] for entry in platform["files"]} == {"kubectl-dflash", "LICENSE"}
    expressions = {e["key"]: set(e["values"]) for e in platform["selector"]["matchExpressions"]}
    assert expressions == {"os": {"linux", "darwin"}, "arch": {"amd64", "arm64"}}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda m: m.update(kind="Plugins"), "kind is 'Plugins', not Plugin"),
        (lambda m: m["spec"].pop("shortDescription"), "spec.shortDescription is missing"),
        (lambda m: m["spec"]["platforms"][0].update(bin="dflash"), "bin is 'dflash'"),
        (lambda m: m["spec"]["platforms"][0]["files"].pop(), "does not copy LICENSE"),
        (
            lambda m: m["spec"]["platforms"][0]["selector"]["matchExpressions"][0].update(
                values=["linux"]
            ),
            "0 platforms select os=darwin arch=amd64",
        ),
        (lambda m: m["spec"]["platforms"].append(m["spec"]["platforms"][0]), "2 platforms select"),
    ],
)
def test_the_shape_check_names_what_is_wrong(change: Any, problem: str) -> None:
    manifest = template()
    change(manifest)

    assert any(problem in p for p in manifest_problems(manifest, filled=False))


def test_the_generator_fills_version_url_and_the_archives_sha256(tmp_path: Path) -> None:
    zipapp = tmp_path / "kubectl-dflash"
    zipapp.write_bytes(b"#!/usr/bin/env python3\nPK")
    tarball = tmp_path / "kubectl-dflash.tar.gz"
    write_tarball(zipapp, tarball)
    output = tmp_path / "dflash.yaml"

    code = main(
        ["--version", "0.2.0", "--url", URL, "--sha256-of", str(tarball), "--output", str(output)]
    )

    manifest = yaml.safe_load(output.read_text())
    (platform,) = manifest["spec"]["platforms"]
    assert code == 0
    assert manifest["spec"]["version"] == "v0.2.0"
    assert platform["uri"] == URL
    assert platform["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest()
    assert manifest_problems(manifest, filled=True) == []
    # What the manifest copies out of the archive is what the archive holds.
    with tarfile.open(tarball) as archive:
        members = {m.name: m for m in archive.getmembers()}
    assert {entry["from"] for entry in platform["files"]} == set(members)
    assert members[platform["bin"]].mode & 0o111


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--version", "two", "--url", URL], "--version 'two' is not a version like v1.2.3"),
        (["--version", "v1.0.0", "--url", "http://x/k.tar.gz"], "is not an https:// URL"),
    ],
)
def test_the_generator_refuses_a_bad_version_or_url(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tarball = tmp_path / "kubectl-dflash.tar.gz"
    tarball.write_bytes(b"x")

    code = main([*args, "--sha256-of", str(tarball), "--output", "-"])

    assert code == 1
    assert message in capsys.readouterr().err


def test_the_generator_says_how_to_build_a_missing_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--version", "v1.0.0", "--url", URL, "--sha256-of", str(tmp_path / "none")])

    assert code == 1
    assert "no such file (build it with make plugin)" in capsys.readouterr().err


def test_a_template_without_a_placeholder_is_refused() -> None:
    text = TEMPLATE.read_text().replace(krew_manifest.PLACEHOLDERS["sha256"], "0" * 64)

    with pytest.raises(krew_manifest.ManifestError, match="no \\{\\{SHA256\\}\\} placeholder"):
        fill(text, "v1.0.0", URL, "a" * 64)
