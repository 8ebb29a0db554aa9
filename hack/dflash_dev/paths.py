"""Where the dev tooling keeps things: repo-local state, and the per-user build cache."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def state_root() -> Path:
    """Runtime state (pids, certs, kubeconfig, logs, S3 data) of this checkout."""
    return Path(os.environ.get("DFLASH_STATE_DIR", REPO_ROOT / ".local")).resolve()


def cache_root() -> Path:
    """Built binaries, shared by every checkout and by CI on this machine."""
    return Path(os.environ.get("DFLASH_CACHE", Path.home() / ".cache" / "dflash"))


def venv_bin() -> Path:
    return REPO_ROOT / ".venv" / "bin"
