"""The trainer's own version, from the installed package's metadata (`--version` of its
console scripts); the repository's VERSION file is the one source."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "dflash-trainer"
UNKNOWN_VERSION = "0.0.0-unknown"


def trainer_version() -> str:
    """The installed dflash-trainer's version, or UNKNOWN_VERSION from bare sources."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN_VERSION
