"""The operator's own version, read at run time from the installed package's metadata. The
repository's `VERSION` file is the one source; `make set-version` writes it into the packages.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "dflash-operator"
# Reported when the sources are imported without the package installed (no metadata to read);
# still a valid image tag, so the stage image defaults stay well-formed.
UNKNOWN_VERSION = "0.0.0-unknown"


def installed_version(distribution: str = DISTRIBUTION) -> str:
    """The version of the installed distribution, or UNKNOWN_VERSION when it is not installed."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return UNKNOWN_VERSION


OPERATOR_VERSION = installed_version()
