"""Load a model from the run's S3 copy through one node-local cache shared by the node's ranks.

    materialize("s3://bucket/.../model", include_weights=True) -> Path of a local model folder

The 8 ranks of a training node (and every process of a regeneration pod) call this at the
same time. The first to take an exclusive `flock` on the cache folder's lock file downloads
what is missing with parallel ranged GETs (`model.ranged_get`); the others block on the lock,
then find every file complete and download nothing. A file is complete when its marker
(`.dflash/done/<path>.json`, written after the file was verified and moved into place) matches
what the source says. Files are written under `.dflash/tmp/` and moved into place with
`os.replace`, so no process ever opens a half-written file.

Verification: when the prefix holds the model stage's manifest (`dflash-model.json`), each
downloaded file's sha256 must match it (a mismatch is downloaded once more, then refused: the
S3 copy is corrupt) and a manifest with `complete: false` is refused (the model stage has not
finished). Without a manifest (a user's own `s3://` model) the files are those listed under
the prefix and their sizes are checked.

Cache folder: `<root>/<sha256(prefix)[:16]>`, root = $DFLASH_MODEL_CACHE, else the caller's
`cache_root` (the trainer's `target.cache_dir`/models), else `$DFLASH_CACHE/models` or
`~/.cache/dflash/models`. Local paths and Hub ids are returned as they are.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from dflash_trainer.model.manifest import MANIFEST_NAME, ManifestError, ModelManifest
from dflash_trainer.model.ranged_get import (
    FetchSettings,
    FetchSettingsError,
    ObjectJob,
    RangedFetcher,
)
from dflash_trainer.storage import (
    S3Settings,
    StorageError,
    is_s3_uri,
    s3_client,
    sha256_file,
    store_for,
)

log = logging.getLogger(__name__)

# Only what a tokenizer needs: stages that never run the model must not pull its weights.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "config.json",
    "generation_config.json",
)
STATE_DIR = ".dflash"
LOCK_NAME = "lock"
VERIFY_ATTEMPTS = 2


class ModelCacheError(StorageError):
    """The model cannot be materialized. `user_fixable`: retrying the same command cannot help
    (a corrupt copy, an unfinished model stage, an empty prefix): stages exit 2 on it."""

    def __init__(self, message: str, user_fixable: bool) -> None:
        super().__init__(message)
        self.user_fixable = user_fixable


@dataclass(frozen=True)
class WantedFile:
    """One file of the model as its source describes it."""

    path: str  # relative to the prefix
    uri: str
    size: int
    sha256: str | None  # known when the prefix has a manifest


@dataclass
class CacheReport:
    """What one `fetch_to_cache` call did (the tests and the benchmark read it)."""

    path: Path
    downloaded: list[str] = field(default_factory=list)
    downloaded_bytes: int = 0
    get_requests: int = 0
    reused: int = 0
    waited_seconds: float = 0.0


def resolve_cache_root(default: Path | None = None) -> Path:
    env = os.environ.get("DFLASH_MODEL_CACHE")
    if env:
        return Path(env)
    if default is not None:
        return default
    base = os.environ.get("DFLASH_CACHE") or str(Path.home() / ".cache" / "dflash")
    return Path(base) / "models"


def cache_folder(prefix: str, root: Path) -> Path:
    return root / hashlib.sha256(prefix.encode()).hexdigest()[:16]


def _read_manifest(prefix: str) -> ModelManifest | None:
    uri = prefix + MANIFEST_NAME
    try:
        data = store_for(uri).read_bytes(uri)
    except StorageError as exc:
        if str(exc).endswith("does not exist"):
            return None
        raise
    try:
        return ModelManifest.from_json(json.loads(data), where=uri)
    except (json.JSONDecodeError, UnicodeDecodeError, ManifestError) as exc:
        raise ModelCacheError(f"{uri} is not a model manifest: {exc}", user_fixable=True) from None


def wanted_files(prefix: str, include_weights: bool) -> list[WantedFile]:
    """The files to materialize: the manifest's (verified by sha256) or the listing's (sizes)."""
    manifest = _read_manifest(prefix)
    if manifest is not None:
        if not manifest.complete:
            raise ModelCacheError(
                f"{prefix}{MANIFEST_NAME} says complete=false: the model stage has not finished "
                f"copying {manifest.model} ({len(manifest.files)} files so far); let it finish "
                "or retry it",
                user_fixable=True,
            )
        files = [WantedFile(f.path, prefix + f.path, f.size, f.sha256) for f in manifest.files]
    else:
        objects = store_for(prefix).list(prefix)
        files = [
            WantedFile(o.uri[len(prefix) :], o.uri, o.size, None)
            for o in objects
            if o.uri.startswith(prefix)
        ]
        if not files:
            raise ModelCacheError(f"{prefix}: no files under this S3 prefix", user_fixable=True)
    for f in files:
        parts = f.path.split("/")
        if f.path.startswith("/") or ".." in parts or STATE_DIR in parts:
            raise ModelCacheError(
                f"{f.uri}: the path {f.path!r} cannot be stored in a model folder",
                user_fixable=True,
            )
    if not include_weights:
        files = [f for f in files if f.path in TOKENIZER_FILES]
    return files


@contextlib.contextmanager
def node_lock(folder: Path, source: str) -> Iterator[float]:
    """Hold the exclusive lock of `folder` (yields the seconds spent waiting for it). The kernel
    drops a flock when its process dies, so a crashed holder never blocks the node."""
    state = folder / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    fd = os.open(state / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    started = time.monotonic()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process fetching %s into %s", source, folder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield time.monotonic() - started
    finally:
        os.close(fd)  # closing releases the lock


def _marker(folder: Path, path: str) -> Path:
    return folder / STATE_DIR / "done" / f"{path}.json"


def is_complete(folder: Path, wanted: WantedFile) -> bool:
    """The file is in place, with the marker written after its verification."""
    try:
        marker = json.loads(_marker(folder, wanted.path).read_text())
        size = (folder / wanted.path).stat().st_size
    except (OSError, ValueError):
        return False
    return (
        size == wanted.size
        and marker.get("size") == wanted.size
        and (wanted.sha256 is None or marker.get("sha256") == wanted.sha256)
    )


def _write_marker(folder: Path, wanted: WantedFile, sha256: str | None) -> None:
    marker = _marker(folder, wanted.path)
    marker.parent.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(json.dumps({"size": wanted.size, "sha256": sha256, "source": wanted.uri}))
    tmp.replace(marker)


def _adopt(folder: Path, wanted: WantedFile) -> bool:
    """A file already in place without a marker (a cache of an earlier version): keep it if it
    verifies, so an upgrade does not download the model again."""
    target = folder / wanted.path
    if not target.is_file() or target.stat().st_size != wanted.size:
        return False
    digest = sha256_file(target) if wanted.sha256 else None
    if digest != wanted.sha256:
        return False
    _write_marker(folder, wanted, digest)
    return True


def _temp_path(folder: Path, wanted: WantedFile) -> Path:
    return folder / STATE_DIR / "tmp" / (wanted.path.replace("/", "%2F") + f".{os.getpid()}.part")


def _check_and_place(folder: Path, wanted: WantedFile, tmp: Path) -> None:
    """Verify a downloaded file and move it into place; raises ModelCacheError on mismatch."""
    size = tmp.stat().st_size
    if size != wanted.size:
        raise ModelCacheError(
            f"{wanted.uri}: downloaded {size} bytes, expected {wanted.size}", user_fixable=False
        )
    digest = sha256_file(tmp) if wanted.sha256 else None
    if digest != wanted.sha256:
        raise ModelCacheError(
            f"{wanted.uri}: sha256 {digest} does not match {MANIFEST_NAME} ({wanted.sha256})",
            user_fixable=True,
        )
    target = folder / wanted.path
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.replace(target)  # atomic: readers see the old file or the whole new one
    _write_marker(folder, wanted, digest)


def _download(
    folder: Path, files: list[WantedFile], settings: FetchSettings, report: CacheReport
) -> list[tuple[WantedFile, str]]:
    """Download `files` into place; returns those that failed their sha256 check, each with
    the one-line reason."""
    client = s3_client(S3Settings.from_env(), settings.concurrency + 2)
    fetcher = RangedFetcher(client, settings)
    by_tmp = {_temp_path(folder, f): f for f in files}
    mismatched: list[tuple[WantedFile, str]] = []
    lock = threading.Lock()

    def done(job: ObjectJob) -> None:
        wanted = by_tmp[job.path]
        try:
            _check_and_place(folder, wanted, job.path)
        except ModelCacheError as exc:
            if not exc.user_fixable:
                raise
            job.path.unlink(missing_ok=True)
            with lock:
                mismatched.append((wanted, str(exc)))
            return
        with lock:
            report.downloaded.append(wanted.path)

    try:
        fetcher.fetch([ObjectJob(f.uri, f.size, tmp) for tmp, f in by_tmp.items()], done)
    finally:
        report.downloaded_bytes += fetcher.counters.bytes
        report.get_requests += fetcher.counters.requests
        for tmp in by_tmp:
            tmp.unlink(missing_ok=True)
    return mismatched


def fetch_to_cache(model_uri: str, include_weights: bool, root: Path | None = None) -> CacheReport:
    """`materialize` with a report of what was downloaded (see the module doc)."""
    if not is_s3_uri(model_uri):
        return CacheReport(Path(model_uri))
    prefix = model_uri.rstrip("/") + "/"
    try:
        settings = FetchSettings.from_env()
    except FetchSettingsError as exc:
        raise ModelCacheError(str(exc), user_fixable=True) from None
    files = wanted_files(prefix, include_weights)
    folder = cache_folder(prefix, resolve_cache_root(root))
    report = CacheReport(folder)
    with node_lock(folder, prefix) as waited:
        report.waited_seconds = waited
        shutil.rmtree(folder / STATE_DIR / "tmp", ignore_errors=True)  # a crashed holder's
        missing = []
        for wanted in files:
            if is_complete(folder, wanted) or _adopt(folder, wanted):
                report.reused += 1
            else:
                (folder / wanted.path).unlink(missing_ok=True)
                _marker(folder, wanted.path).unlink(missing_ok=True)
                missing.append(wanted)
        if not missing:
            return report
        started = time.monotonic()
        for attempt in range(1, VERIFY_ATTEMPTS + 1):
            failed = _download(folder, missing, settings, report)
            if not failed:
                break
            if attempt == VERIFY_ATTEMPTS:
                raise ModelCacheError(
                    f"{failed[0][1]}, {VERIFY_ATTEMPTS} downloads in a row: the S3 copy is "
                    "corrupt; delete that object and retry the model stage (it copies the "
                    "missing file again)",
                    user_fixable=True,
                )
            for _wanted, reason in failed:
                log.warning("%s; downloading it again", reason)
            missing = [wanted for wanted, _reason in failed]
        took = max(time.monotonic() - started, 1e-6)
        log.info(
            "model cache: %d files, %.1f MB from %s in %.1f s (%.0f MB/s, %d parallel GETs of "
            "up to %d MiB) into %s; %d already there",
            len(report.downloaded),
            report.downloaded_bytes / 1e6,
            prefix,
            took,
            report.downloaded_bytes / 1e6 / took,
            settings.concurrency,
            settings.part_size // 2**20,
            folder,
            report.reused,
        )
    return report


def materialize(model_uri: str, include_weights: bool, cache_root: Path | None = None) -> Path:
    """A local folder holding the model at `model_uri` (an s3:// prefix is fetched into the
    node-local cache once per node; a local path is returned as is). `include_weights=False`
    fetches only the config and tokenizer files."""
    return fetch_to_cache(model_uri, include_weights, cache_root).path
