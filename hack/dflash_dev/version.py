"""The release version. `VERSION` at the repository root is the one source; this module writes
it into every file that must carry a copy (the workspace's pyproject.toml files, uv.lock's
workspace entries, the chart's version and appVersion, the Helm-repository GitOps example's
targetRevision) and finds the copies that disagree.

    python -m dflash_dev.version            print the version
    python -m dflash_dev.version check      exit 1 and name every copy that disagrees
    python -m dflash_dev.version set X.Y.Z  write it everywhere (`make set-version VERSION=X.Y.Z`)

The operator reads its version at run time from package metadata (`dflash_operator.version`);
the Makefile tags images with it; the release workflow checks the git tag against it.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import DevError
from .paths import REPO_ROOT

VERSION_FILE = "VERSION"
# X.Y.Z only: the one form that is at once a PEP 440 version that packaging leaves as written
# (so package metadata reads back the same string), a SemVer 2 chart version, and an image tag.
_RELEASE = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
PYPROJECTS = (
    "pyproject.toml",
    "operator/pyproject.toml",
    "trainer/pyproject.toml",
    "hack/pyproject.toml",
    "memplan/pyproject.toml",
)
CHART = "charts/dflash-operator/Chart.yaml"
# The GitOps example that installs the chart from a Helm repository pins its version.
HELM_REPO_APP = "examples/gitops/from-helm-repo/dflash-operator.yaml"
LOCK = "uv.lock"
# The lock's entries for the workspace itself (`uv lock` rewrites them from the pyproject files).
WORKSPACE_PACKAGES = (
    "dflash-workspace", "dflash-operator", "dflash-trainer", "dflash-dev", "dflash-memplan",
)  # fmt: skip


@dataclass(frozen=True)
class VersionCopy:
    """One place that repeats the version: group 2 of `pattern` is the version itself."""

    path: str
    label: str
    pattern: re.Pattern[str]

    def read(self, root: Path) -> str | None:
        match = self.pattern.search((root / self.path).read_text())
        return match.group(2) if match else None

    def write(self, root: Path, version: str) -> None:
        file = root / self.path
        text, count = self.pattern.subn(lambda m: f"{m[1]}{version}{m[3]}", file.read_text(), 1)
        if count != 1:
            raise DevError(f"{self.path}: cannot find {self.label} to set it to {version}")
        file.write_text(text)


def build_copies() -> tuple[VersionCopy, ...]:
    """Every copy of the version in the repository, in the order `set` writes them."""
    copies = [
        VersionCopy(
            path,
            "[project] version",
            # The first `version = "..."` line after [project], before any other table.
            re.compile(r'(^\[project\]\n(?:[^\[\n].*\n|\n)*?version = ")([^"]*)(")', re.M),
        )
        for path in PYPROJECTS
    ]
    copies.append(VersionCopy(CHART, "version", re.compile(r"(^version: )(\S+)()$", re.M)))
    copies.append(
        VersionCopy(CHART, "appVersion", re.compile(r'(^appVersion: ")([^"]*)(")$', re.M))
    )
    copies.append(
        VersionCopy(
            HELM_REPO_APP,
            "the chart's targetRevision",
            re.compile(r"(^    targetRevision: )(\S+)()(?= |$)", re.M),
        )
    )
    copies.extend(
        VersionCopy(
            LOCK,
            f"the version of package {name}",
            re.compile(rf'(^\[\[package\]\]\nname = "{name}"\nversion = ")([^"]*)(")', re.M),
        )
        for name in WORKSPACE_PACKAGES
    )
    return tuple(copies)


def check_release_version(version: str, source: str) -> str:
    """The version, or DevError naming where it came from and the accepted form."""
    if not _RELEASE.fullmatch(version):
        raise DevError(
            f"{source}: version {version!r} is not a release version; accepted: X.Y.Z with "
            "numbers and no leading zeros, e.g. 0.2.0 (no 'v' prefix, no pre-release suffix)"
        )
    return version


def read_version(root: Path = REPO_ROOT) -> str:
    """The version of the `VERSION` file, checked."""
    file = root / VERSION_FILE
    if not file.is_file():
        raise DevError(f"{file} is missing: it holds the release version, e.g. 0.1.0")
    return check_release_version(file.read_text().strip(), VERSION_FILE)


def find_mismatches(root: Path = REPO_ROOT) -> list[str]:
    """One message per copy that is missing or differs from `VERSION`; empty when all agree."""
    version = read_version(root)
    problems = []
    for copy in build_copies():
        if not (root / copy.path).is_file():
            problems.append(f"{copy.path}: missing (it should carry {copy.label} {version})")
            continue
        found = copy.read(root)
        if found is None:
            problems.append(f"{copy.path}: no {copy.label} found (expected {version})")
        elif found != version:
            problems.append(
                f"{copy.path}: {copy.label} is {found!r}, {VERSION_FILE} says {version!r}; "
                f"run `make set-version VERSION={version}`"
            )
    return problems


def set_version(version: str, root: Path = REPO_ROOT) -> None:
    """Write `version` into `VERSION` and every copy (the Makefile runs `uv lock` after)."""
    check_release_version(version, "set-version")
    (root / VERSION_FILE).write_text(f"{version}\n")
    for copy in build_copies():
        copy.write(root, version)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflash_dev.version", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("show", help="print the version (the default)")
    sub.add_parser("check", help="fail when a copy of the version disagrees with VERSION")
    setter = sub.add_parser("set", help="write a new version into VERSION and every copy")
    setter.add_argument("version", help="X.Y.Z")
    args = parser.parse_args(argv)
    try:
        if args.command == "set":
            set_version(args.version)
            print(f"version set to {args.version} in {VERSION_FILE} and every copy")
        elif args.command == "check":
            problems = find_mismatches()
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                return 1
            print(f"every copy says {read_version()}")
        else:
            print(read_version())
    except DevError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
