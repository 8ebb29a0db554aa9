"""`make images` / `make base-images` without an engine: the bases the Dockerfiles name, the
build command of each engine, the proxy CA secret, and when CI must build the regen image."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from dflash_dev.errors import DevError
from dflash_dev.images import regen_inputs
from dflash_dev.images.build import (
    IMAGES,
    all_base_args,
    base_args,
    dockerfile,
    proxy_ca_file,
    qualified,
    strip_digest,
)
from dflash_dev.images.engine import Engine, build_argv, detect_engine

ROOT = Path(__file__).parents[3]


def test_the_bases_are_the_upstream_images_and_the_dockerfiles_agree_on_them() -> None:
    args = all_base_args()
    assert args["UV_IMAGE"] == "ghcr.io/astral-sh/uv:0.13.9"
    assert args["PYTHON_BASE"].startswith("python:3.11.")
    assert args["CUDA_BASE"].startswith("nvidia/cuda:13.")
    assert args["VLLM_BASE"].startswith("vllm/vllm-openai:v")
    assert set(base_args(dockerfile("operator"))) == {"UV_IMAGE", "PYTHON_BASE"}
    assert {i: sorted(base_args(dockerfile(i))) for i in IMAGES}["regen"] == [
        "UV_IMAGE",
        "VLLM_BASE",
    ]


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("python:3.11.18-slim-trixie", "docker.io/library/python:3.11.18-slim-trixie"),
        ("vllm/vllm-openai:v0.33.0", "docker.io/vllm/vllm-openai:v0.33.0"),
        ("ghcr.io/astral-sh/uv:0.13.9", "ghcr.io/astral-sh/uv:0.13.9"),
        ("localhost/x:1", "localhost/x:1"),
    ],
)
def test_stand_ins_are_tagged_with_the_fully_qualified_upstream_name(
    ref: str, expected: str
) -> None:
    assert qualified(ref) == expected


def test_a_digest_pin_is_dropped_for_the_stand_in_tag() -> None:
    assert strip_digest("python:3.11.18-slim-trixie@sha256:abc") == "python:3.11.18-slim-trixie"
    assert strip_digest("python:3.11.18-slim-trixie") == "python:3.11.18-slim-trixie"


@pytest.mark.parametrize(
    ("kind", "head"),
    [
        ("docker", ["docker", "build"]),
        ("podman", ["podman", "build", "--layers", "--isolation=chroot"]),
        ("buildah", ["buildah", "build", "--layers", "--isolation=chroot"]),
    ],
)
def test_each_engine_builds_with_the_same_flags(
    kind: str, head: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BUILDAH_ISOLATION", raising=False)
    argv = build_argv(
        Engine(kind, kind), Path("images/trainer/Dockerfile"), "t:1", Path(),
        {"CUDA_BASE": "c:1"}, {"proxy-ca": Path("/ca.pem")},
    )  # fmt: skip
    assert argv[: len(head)] == head
    assert argv[len(head) :] == [
        "-f", "images/trainer/Dockerfile", "-t", "t:1", "--build-arg", "CUDA_BASE=c:1",
        "--secret", "id=proxy-ca,src=/ca.pem", ".",
    ]  # fmt: skip


def test_the_proxy_ca_is_the_given_file_else_ssl_cert_file_else_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("PEM")
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    assert proxy_ca_file(None, tmp_path) == (ca, f"SSL_CERT_FILE={ca}")
    monkeypatch.delenv("SSL_CERT_FILE")
    empty, said = proxy_ca_file(None, tmp_path)
    assert said == "none" and empty.read_text() == ""
    with pytest.raises(DevError, match="PROXY_CA=/nope: no such file"):
        proxy_ca_file("/nope", tmp_path)


def test_no_engine_says_which_were_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DevError, match="no container engine answers '/nonexistent/docker info'"):
        detect_engine("/nonexistent/docker")


def test_ci_builds_the_regen_image_only_when_its_inputs_changed(tmp_path: Path) -> None:
    for name in regen_inputs.INPUTS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, tmp_path / name)
    assert regen_inputs.is_changed(tmp_path)  # never tested
    regen_inputs.write_stamp(tmp_path)
    assert not regen_inputs.is_changed(tmp_path)
    (tmp_path / "images/regen/requirements.txt").write_text("vllm==9.9.9\n")
    assert regen_inputs.is_changed(tmp_path)
