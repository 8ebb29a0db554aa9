"""The hashes that prove a downloaded file is the one the Hub holds.

The Hub publishes, per file of a commit, the sha256 of LFS files (`lfs.sha256`, all weights)
and the git blob id of the others (`blobId`: sha1 of `b"blob <size>\\0" + content`).
`huggingface_hub` checks only the size of a plain HTTP download, so the model stage checks
these itself, and records the sha256 of every file for the loaders to verify against.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

HASH_BLOCK = 8 * 1024 * 1024


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob with this content (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class FileDigests:
    size: int
    sha256: str
    git_sha1: str


def file_digests(path: Path) -> FileDigests:
    """sha256 and git blob sha1 of a file in one read."""
    size = path.stat().st_size
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
    with path.open("rb") as handle:
        while block := handle.read(HASH_BLOCK):
            sha256.update(block)
            sha1.update(block)
    return FileDigests(size, sha256.hexdigest(), sha1.hexdigest())


@dataclass(frozen=True)
class HubHash:
    """What the Hub says a file hashes to: `kind` is "sha256" (LFS) or "git-sha1"."""

    kind: str
    value: str

    def actual(self, digests: FileDigests) -> str:
        return digests.sha256 if self.kind == "sha256" else digests.git_sha1


class HashMismatchError(Exception):
    """A downloaded file whose content is not what its publisher says (one line)."""


def check_hub_hash(name: str, expected: HubHash, digests: FileDigests) -> None:
    actual = expected.actual(digests)
    if actual != expected.value:
        raise HashMismatchError(
            f"{name}: {expected.kind} mismatch: the Hub lists {expected.value}, the download "
            f"has {actual} ({digests.size} bytes); nothing was recorded for this file"
        )
