"""The GPU machine's stack as a CPU environment for the tests: `make test-version-floor`.
Cached under ~/.cache/dflash/envs/floor-<digest of the pins>, built once per pin set.

The GPU machine (issue 23, 29) runs Python 3.12 with torch 2.11 and transformers 5.17, the
oldest the trainer supports, and preinstalls psutil, numpy 2.5, pyarrow and xxhash
(/work/.library's device notes, docs/benchmarks.md "GPU smoke"): psutil alone switches
transformers' engine onto continuous batching, so the tests must see it. numpy 2.5 needs Python
3.12, so the environment is its own Python 3.12 venv: torch 2.11 with triton 3.6 and (never
loaded on CPU) the lock's CUDA 13 wheels, --no-deps; every other package of uv.lock at the
lock's version, --no-deps; then the floor's pins with their own dependencies. The workspace
packages (editable, in whichever checkout runs the tests) come from the caller's .venv through
a .pth: BASE_SITE_VAR; everything compiled is the environment's own, for Python 3.12.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from .errors import DevError
from .paths import REPO_ROOT, cache_root
from .regen_requirements import EXCLUDE_NEWER, uv_binary

PYTHON = "3.12"
# The GPU machine's torch stack, installed without dependencies (the lock's CUDA wheels serve).
# torch 2.11 loads libcurand at import; the lock's torch 2.15 dropped it (its pin in 2.11).
TORCH_STACK = {"torch": "2.11.0", "triton": "3.6.0", "nvidia-curand": "10.4.0.35"}
# The floor, with its own dependencies: transformers 5.17 takes huggingface-hub >= 1.5, < 2 (the
# GPU machine has 1.33.0), and the GPU image's other preinstalled packages the stages import.
FLOOR = {"torch": "2.11.0", "transformers": "5.17.0", "huggingface-hub": "1.33.0"}
GPU_IMAGE_PACKAGES = {"numpy": "2.5.2", "psutil": "", "pyarrow": "", "xxhash": ""}
# Installed by the two steps above, so left out of the lock's list.
NOT_FROM_LOCK = re.compile(r"^(torch|triton|transformers|huggingface-hub|numpy|psutil|pyarrow|"
                           r"xxhash|nvidia-.*|cuda-.*)$")  # fmt: skip
COMPLETE = ".dflash-complete"
BASE_PTH = "_dflash_base_venv.pth"
# The environment is cached per version set and shared by every checkout, so it names no
# checkout's .venv: the caller says which one through this variable (`make
# test-version-floor`, `main`). An `import` line of a .pth runs at start-up; addsitedir also
# reads that .venv's own .pth files (the editable workspace packages), and appends, so the
# floor's packages win.
BASE_SITE_VAR = "DFLASH_FLOOR_BASE_SITE"
BASE_PTH_LINE = (
    f"import os, site; base = os.environ.get({BASE_SITE_VAR!r}); base and site.addsitedir(base)\n"
)


def floor_pins() -> list[str]:
    torch_stack = [f"{name}=={version}" for name, version in TORCH_STACK.items()]
    rest = {**{k: v for k, v in FLOOR.items() if k not in TORCH_STACK}, **GPU_IMAGE_PACKAGES}
    return [*torch_stack, *(f"{name}=={v}" if v else name for name, v in rest.items())]


def env_root() -> Path:
    """Keyed by every pin, the Python and the lock: a change to any builds a new environment."""
    lock = (REPO_ROOT / "uv.lock").read_bytes()
    key = "\n".join([PYTHON, EXCLUDE_NEWER, *floor_pins()]).encode() + lock
    return cache_root() / "envs" / f"floor-py{PYTHON}-{hashlib.sha256(key).hexdigest()[:12]}"


def base_site_packages() -> str:
    """The site-packages of the interpreter running this (the project's .venv)."""
    return sysconfig.get_paths()["purelib"]


def find_python() -> str:
    """A CPython 3.12: $DFLASH_FLOOR_PYTHON, python3.12 on PATH, or pyenv's."""
    candidates = [os.environ.get("DFLASH_FLOOR_PYTHON", ""), shutil.which(f"python{PYTHON}") or ""]
    pyenv = Path.home() / ".pyenv" / "versions"
    candidates += sorted(str(p) for p in pyenv.glob(f"{PYTHON}*/bin/python{PYTHON}"))
    for candidate in filter(None, candidates):
        done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode == 0 and done.stdout.strip() == f"({PYTHON.replace('.', ', ')})":
            return candidate
    raise DevError(
        f"the version floor runs on Python {PYTHON} (the GPU machine's) and none was found: "
        f"install one (pyenv install {PYTHON}) or set DFLASH_FLOOR_PYTHON to its path"
    )


def _run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO_ROOT)
    if result.returncode != 0:
        raise DevError(f"{' '.join(argv[:3])} failed:\n{result.stderr.strip()[-2000:]}")
    return result.stdout


def locked_requirements() -> list[str]:
    """uv.lock's pins of every package of the workspace (dev tools included), with markers, but
    the ones the floor installs itself."""
    text = _run([uv_binary(), "export", "--locked", "--all-packages", "--no-hashes",
                 "--no-emit-workspace", "--no-header", "--format", "requirements.txt"])  # fmt: skip
    pins = []
    for line in text.splitlines():
        line = line.strip()
        match = re.match(r"^([A-Za-z0-9_.\-]+)==", line)
        if match and not NOT_FROM_LOCK.match(match.group(1).lower().replace("_", "-")):
            pins.append(line)
    return pins


def locked_cuda_pins() -> list[str]:
    text = _run([uv_binary(), "export", "--locked", "--package", "dflash-trainer", "--no-dev",
                 "--no-emit-workspace", "--no-hashes", "--format", "requirements.txt"])  # fmt: skip
    return re.findall(r"^(nvidia-[A-Za-z0-9_.\-]+==[^\s;]+)", text, re.MULTILINE)


def ensure() -> Path:
    """The floor environment's python, building it when missing."""
    root = env_root()
    python = root / "bin" / "python"
    if (root / COMPLETE).exists() and python.exists():
        _write_base_pth(python)
        return python
    shutil.rmtree(root, ignore_errors=True)
    uv = uv_binary()
    _run([uv, "venv", "--quiet", "--python", find_python(), str(root)])
    pins = floor_pins()
    torch_stack = pins[: len(TORCH_STACK)]
    # Resolved as of the regen image's fixed date: the same environment on every machine.
    install = [uv, "pip", "install", "--quiet", "--python", str(python)]
    _run([*install, "--no-deps", *torch_stack, *locked_cuda_pins()])
    _run([*install, "--no-deps", *locked_requirements()])
    _run([*install, "--exclude-newer", EXCLUDE_NEWER, *pins[len(TORCH_STACK) :]])
    _write_base_pth(python)
    (root / COMPLETE).write_text(" ".join(pins) + "\n")
    return python


def _write_base_pth(python: Path) -> None:
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    pth = Path(site) / BASE_PTH
    if not pth.exists() or pth.read_text() != BASE_PTH_LINE:
        pth.write_text(BASE_PTH_LINE)


VERSIONS_LINE = (
    "import sys, numpy, psutil, torch, transformers; print(f'version floor: Python "
    "{sys.version.split()[0]}, torch {torch.__version__}, transformers "
    "{transformers.__version__}, numpy {numpy.__version__}, psutil {psutil.__version__}')"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.floor_env", description=__doc__)
    parser.add_argument("--python", action="store_true", help="print the env's python path")
    parser.add_argument(
        "--base-site",
        action="store_true",
        help=f"print the .venv site-packages to pass in {BASE_SITE_VAR}",
    )
    args = parser.parse_args(argv)
    try:
        python = ensure()
    except DevError as error:
        print(f"floor-env: {error}", file=sys.stderr)
        return 1
    if args.python:
        print(python)
        return 0
    if args.base_site:
        print(base_site_packages())
        return 0
    check = subprocess.run(
        [str(python), "-c", VERSIONS_LINE],
        cwd=REPO_ROOT, check=False, env={**os.environ, BASE_SITE_VAR: base_site_packages()},
    )  # fmt: skip
    return check.returncode


if __name__ == "__main__":
    sys.exit(main())
