"""`images/regen/requirements.txt`: the exact set the regen image installs on top of vLLM,
resolved against the vLLM version of the Dockerfile's `FROM` tag.

`python -m dflash_dev.regen_requirements` (`make regen-requirements`) writes it;
`--check` resolves it again and fails when the checked-in file is not what the lock and the
Dockerfile give today (the test suite runs it). The resolution is reproducible: uv resolves as
of `EXCLUDE_NEWER`, preferring uv.lock's pins (then the file's own pins) wherever vLLM allows
them, so only what vLLM forbids moves (vllm 0.33.0: torch 2.14.0, transformers 5.20.x, numpy
2.3.x instead of the lock's 2.15.0, 5.24.0, 2.4.6).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from .errors import DevError
from .paths import REPO_ROOT

DOCKERFILE = REPO_ROOT / "images" / "regen" / "Dockerfile"
REQUIREMENTS = REPO_ROOT / "images" / "regen" / "requirements.txt"
TRAINER_PYPROJECT = REPO_ROOT / "trainer" / "pyproject.toml"
WORKSPACE_PYPROJECT = REPO_ROOT / "pyproject.toml"
# The vLLM image's interpreter and platform (vllm/vllm-openai: Ubuntu 22.04, CPython 3.12).
PYTHON_VERSION = "3.12"
PLATFORM = "x86_64-manylinux_2_28"
# Resolve as of this instant: the same answer on every machine and every day. Move it on
# purpose, with the vLLM tag or the lock.
EXCLUDE_NEWER = "2026-12-03T00:00:00Z"
COMMAND = "make regen-requirements"
# Installed on top of dflash-trainer's own dependencies: vLLM's Run:ai loader with its S3 backend
# (vllm[runai] without the GCS and Azure backends), so a target in the run's S3 root streams
# straight to the GPUs instead of being copied into each pod first (vllm's own lower bound).
IMAGE_EXTRAS = ("runai-model-streamer[s3]>=0.15.7",)
# The base is a build argument (images/regen/Dockerfile): its default names the vLLM image.
_FROM = re.compile(r"^ARG\s+VLLM_BASE=vllm/vllm-openai:v([^\s@]+)", re.MULTILINE)
_PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==(\S+)")


def vllm_version(dockerfile: Path = DOCKERFILE) -> str:
    """The vLLM version of the Dockerfile's base (the default of its VLLM_BASE argument)."""
    versions = set(_FROM.findall(dockerfile.read_text()))
    if len(versions) != 1:
        raise DevError(
            f"{dockerfile}: expected one ARG VLLM_BASE=vllm/vllm-openai:v<version>, "
            f"found {sorted(versions) or 'none'}"
        )
    return str(versions.pop())


def workspace_packages() -> set[str]:
    """Names of the uv workspace's own packages (built from this repository, not from PyPI)."""
    sources = tomllib.loads(WORKSPACE_PYPROJECT.read_text())["tool"]["uv"]["sources"]
    return {name for name, source in sources.items() if source.get("workspace")}


def trainer_requirements() -> list[str]:
    """dflash-trainer's declared dependencies from PyPI (ranges where vLLM needs room); the
    workspace's own (dflash-memplan) are wheels the Dockerfile builds, never resolved."""
    project = tomllib.loads(TRAINER_PYPROJECT.read_text())["project"]
    own = workspace_packages()
    return [
        req for req in project["dependencies"]
        if re.split(r"[<>=!~; \[]", req, maxsplit=1)[0].lower() not in own
    ]  # fmt: skip


def pins(text: str) -> dict[str, str]:
    """name -> `name==version` lines of a requirements file (hashes and comments ignored)."""
    found = {}
    for line in text.splitlines():
        match = _PIN.match(line.strip())
        if match:
            found[match.group(1).lower()] = f"{match.group(1)}=={match.group(2)}"
    return found


def uv_binary() -> str:
    """uv on PATH, else where `make venv` installs it (the Makefile's UV)."""
    return shutil.which("uv") or str(Path.home() / ".local" / "bin" / "uv")


def _uv(*args: str) -> str:
    result = subprocess.run(
        [uv_binary(), *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise DevError(f"uv {' '.join(args[:2])} failed:\n{result.stderr.strip()}")
    return result.stdout


def lock_pins() -> dict[str, str]:
    """uv.lock's pins for dflash-trainer (torch's own dependency tree pruned: vLLM brings it)."""
    exported = _uv(
        "export", "--locked", "--package", "dflash-trainer", "--no-dev", "--no-emit-workspace",
        "--prune", "torch", "--no-hashes", "--format", "requirements.txt",
    )  # fmt: skip
    return pins(exported)


def moved_pins() -> list[str]:
    """Pins of the trainer's direct dependencies that the regen image holds at another version
    than uv.lock (torch aside: the CPU test environment keeps the lock's)."""
    names = {re.split(r"[<>=!~; \[]", req, maxsplit=1)[0].lower() for req in trainer_requirements()}
    locked = lock_pins()
    image = pins(REQUIREMENTS.read_text())
    return sorted(
        image[name] for name in names - {"torch"}
        if name in image and image[name] != locked.get(name)
    )  # fmt: skip


def resolve(out: Path, previous: str | None) -> str:
    """Resolve the trainer's dependencies with vllm==<the Dockerfile's>, into `out`."""
    version = vllm_version()
    preferred = {**pins(previous or ""), **lock_pins()}  # the lock wins over the old file
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp) / "regen.in"
        inputs.write_text(
            "\n".join([f"vllm=={version}", *trainer_requirements(), *IMAGE_EXTRAS]) + "\n"
        )
        # uv pip compile prefers the versions already pinned in its output file.
        out.write_text("\n".join(sorted(preferred.values())) + "\n")
        _uv(
            "pip", "compile", str(inputs), "--output-file", str(out), "--generate-hashes",
            "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM,
            "--exclude-newer", EXCLUDE_NEWER, "--custom-compile-command", COMMAND,
            "--no-annotate", "--quiet",
        )  # fmt: skip
    text = out.read_text()
    if f"vllm=={version}" not in text:
        raise DevError(f"the resolution of {out} does not hold vllm=={version}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.regen_requirements")
    parser.add_argument("--check", action="store_true", help="fail if the file is not current")
    parser.add_argument(
        "--uv-with", action="store_true",
        help="print `--with name==version` for each pin that differs from uv.lock (torch's "
        "stack aside): the regen image's versions of the trainer's own dependencies",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.uv_with:
        print(" ".join(f"--with {pin}" for pin in moved_pins()))
        return 0
    current = REQUIREMENTS.read_text() if REQUIREMENTS.exists() else None
    try:
        if not args.check:
            resolve(REQUIREMENTS, current)
            print(f"wrote {REQUIREMENTS.relative_to(REPO_ROOT)} (vllm=={vllm_version()})")
            return 0
        with tempfile.TemporaryDirectory() as tmp:
            fresh = resolve(Path(tmp) / "requirements.txt", current)
    except DevError as error:
        print(f"regen-requirements: {error}", file=sys.stderr)
        return 1
    if fresh != current:
        diff = difflib.unified_diff(
            (current or "").splitlines(), fresh.splitlines(), "checked in", "resolved now",
            lineterm="", n=0,
        )  # fmt: skip
        print("\n".join(list(diff)[:60]), file=sys.stderr)
        print(f"{REQUIREMENTS.relative_to(REPO_ROOT)} is not current: run {COMMAND}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"{REQUIREMENTS.relative_to(REPO_ROOT)} is current (vllm=={vllm_version()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
