"""`dflash-model.json`: what the model stage copied into the run root, file by file.

    {"model": "Qwen/Qwen3.6-27B", "revision": "<40-hex commit>", "requestedRevision": "main",
     "files": [{"path": "config.json", "size": 1234, "sha256": "..."}, ...],
     "totalBytes": 54000000000, "complete": false}

The fetch rewrites it after every file it has verified and uploaded, so a killed stage resumes
where it stopped; `complete` turns true only when every selected file is listed. Loaders
(`model.local_cache`) verify each file they download against its `sha256` and refuse a
manifest that is not complete. `totalBytes` is the size of the whole selection (the model),
so `sum(files.size) / totalBytes` is the progress of an unfinished copy. Pure logic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MANIFEST_NAME = "dflash-model.json"


class ManifestError(ValueError):
    """A manifest that cannot be read, or that belongs to another model or commit."""


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass
class ModelManifest:
    model: str
    revision: str
    requested_revision: str | None
    total_bytes: int
    files: list[FileEntry] = field(default_factory=list)
    complete: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "revision": self.revision,
            "requestedRevision": self.requested_revision,
            "files": [f.to_json() for f in sorted(self.files, key=lambda f: f.path)],
            "totalBytes": self.total_bytes,
            "complete": self.complete,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = MANIFEST_NAME) -> ModelManifest:
        try:
            files = [
                FileEntry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in data["files"]
            ]
            return cls(
                model=str(data["model"]),
                revision=str(data["revision"]),
                requested_revision=data.get("requestedRevision"),
                total_bytes=int(data["totalBytes"]),
                files=files,
                complete=bool(data["complete"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(
                f"{where} is not a model manifest: {exc!r} missing or invalid"
            ) from None

    def entry(self, path: str) -> FileEntry | None:
        return next((f for f in self.files if f.path == path), None)

    def record(self, entry: FileEntry) -> None:
        """Add (or replace) the entry of a verified, uploaded file."""
        self.files = [f for f in self.files if f.path != entry.path] + [entry]


@dataclass(frozen=True)
class ResumePlan:
    """What a fetch does about an existing manifest: start over, or keep its files."""

    restart: bool
    # Paths already copied (in the old manifest, object present with the recorded size).
    done: frozenset[str]
    # Objects of an abandoned copy that the new selection does not contain (to delete).
    stale: frozenset[str]


def plan_resume(
    existing: ModelManifest | None,
    model: str,
    revision: str,
    selected: Mapping[str, int],
    objects: Mapping[str, int],
    where: str = MANIFEST_NAME,
) -> ResumePlan:
    """Decide what a fetch of `model`@`revision` keeps of an earlier attempt.

    `selected` maps each file to fetch to its size on the Hub, `objects` each object found under
    the destination to its size. A file is kept when the old manifest lists it with the same size
    as the Hub and its object is there with that size. A manifest of another model or commit:
    when it is complete, something may already have loaded that copy, so it is refused (a run's
    target never changes under it); when it is incomplete, nothing could have used it (loaders
    refuse an incomplete manifest), so the copy starts over.
    """
    if existing is None:
        return ResumePlan(False, frozenset(), frozenset())
    if existing.model != model or existing.revision != revision:
        if existing.complete:
            raise ManifestError(
                f"{where} holds a complete copy of {existing.model}@{existing.revision}, not "
                f"{model}@{revision}: pin spec.target.revision to {existing.revision} to keep "
                "using it, or delete that folder to copy the new revision"
            )
        stale = frozenset(p for p in objects if p not in selected and p != MANIFEST_NAME)
        return ResumePlan(True, frozenset(), stale)
    done = frozenset(
        f.path
        for f in existing.files
        if f.path in selected and selected[f.path] == f.size and objects.get(f.path) == f.size
    )
    return ResumePlan(False, done, frozenset())
