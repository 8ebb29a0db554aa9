"""The oldest torch and transformers the trainer supports, as a CPU environment for the tests:
`make test-version-floor`. Cached under ~/.cache/dflash/envs/floor-<versions>, built once.

It is an overlay on the project's .venv, as `uv run --with` makes one: its own site-packages
holds only the floor's torch (and the libcurand torch 2.11 loads), installed --no-deps, and
transformers and huggingface-hub with their own dependencies; a
.pth file adds the .venv's site-packages after it for everything else (pytest, numpy, the
workspace packages). So torch 2.11 runs with the lock's CUDA 13 wheels (the same sonames;
never loaded on CPU) and the lock's triton, and the downloads are torch and a few small wheels.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from .errors import DevError
from .paths import REPO_ROOT, cache_root
from .regen_requirements import EXCLUDE_NEWER, uv_binary

# The GPU machine's stack (issue 23): torch 2.11 and transformers 5.17. transformers 5.17 takes
# huggingface-hub >= 1.5, < 2: the newest such release when the floor was set.
FLOOR = {"torch": "2.11.0", "transformers": "5.17.0", "huggingface-hub": "1.33.0"}
# torch 2.11 loads libcurand at import; the lock's torch 2.15 dropped it (its pin in 2.11).
EXTRA = {"nvidia-curand": "10.4.0.35"}
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


def env_root() -> Path:
    return cache_root() / "envs" / ("floor-" + "-".join(f"{k}{v}" for k, v in FLOOR.items()))


def base_site_packages() -> str:
    """The site-packages of the interpreter running this (the project's .venv)."""
    return sysconfig.get_paths()["purelib"]


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise DevError(f"{' '.join(argv[:3])} failed:\n{result.stderr.strip()[-2000:]}")


def ensure() -> Path:
    """The floor environment's python, building it when missing."""
    root = env_root()
    python = root / "bin" / "python"
    if (root / COMPLETE).exists() and python.exists():
        _write_base_pth(python)  # an environment built before BASE_SITE_VAR named a .venv
        return python
    shutil.rmtree(root, ignore_errors=True)
    uv = uv_binary()
    _run([uv, "venv", "--quiet", "--python", sys.executable, str(root)])
    pins = [f"{name}=={version}" for name, version in {**FLOOR, **EXTRA}.items()]
    torch_stack = [pin for pin in pins if pin.startswith(("torch==", "nvidia-"))]
    # torch without its dependencies (the .venv's CUDA wheels serve), the rest with theirs
    # (transformers 5.17 imports httpx, which huggingface-hub 2 no longer needs), resolved as
    # of the regen image's fixed date: the same environment on every machine.
    _run([uv, "pip", "install", "--quiet", "--no-deps", "--python", str(python), *torch_stack])
    _run([uv, "pip", "install", "--quiet", "--python", str(python), "--exclude-newer",
          EXCLUDE_NEWER, *(pin for pin in pins if pin not in torch_stack)])  # fmt: skip
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
        [str(python), "-c", "import torch, transformers, huggingface_hub as h; "
         "print(f'floor versions: torch {torch.__version__}, transformers "
         "{transformers.__version__}, huggingface-hub {h.__version__}')"],
        cwd=REPO_ROOT, check=False, env={**os.environ, BASE_SITE_VAR: base_site_packages()},
    )  # fmt: skip
    return check.returncode


if __name__ == "__main__":
    sys.exit(main())
