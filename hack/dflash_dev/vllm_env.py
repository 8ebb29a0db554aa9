"""A CPU virtual environment with the real `vllm` wheel of the regen image's version, cached
under ~/.cache/dflash/envs/vllm-<version> (built once: `uv pip install vllm==<version>`, with
vLLM's own torch, transformers and numpy; ~9 GB, hard-linked from uv's cache). The contract
tests import vLLM there on CPU to check the engine's calls against its real signatures."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .errors import DevError
from .paths import cache_root
from .regen_requirements import uv_binary, vllm_version

COMPLETE = ".dflash-complete"


def ensure(version: str | None = None) -> Path:
    """The environment's python, building the environment when it is missing."""
    version = version or vllm_version()
    root = cache_root() / "envs" / f"vllm-{version}"
    python = root / "bin" / "python"
    if (root / COMPLETE).exists() and python.exists():
        return python
    shutil.rmtree(root, ignore_errors=True)
    uv = uv_binary()
    steps = [
        [uv, "venv", "--quiet", "--python", sys.executable, str(root)],
        [uv, "pip", "install", "--quiet", "--python", str(python), f"vllm=={version}"],
    ]
    for argv in steps:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise DevError(f"{' '.join(argv[:3])} failed:\n{result.stderr.strip()[-2000:]}")
    (root / COMPLETE).write_text(version + "\n")
    return python
