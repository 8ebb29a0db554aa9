"""The `model` stage: copy a Hub model into the run root once, verified, for every pod to load.

    python -m dflash_trainer.model.fetch --model ORG/NAME [--revision REV] --dest URI
        [--termination-log PATH]

Without it, each of the 8 regeneration pods of a B200 node and each training rank downloaded
the whole target (~54 GB for Qwen3.6-27B) from the Hub on its own. Here the revision is
resolved to its commit once, only the files a model load needs are taken (configs, tokenizer,
`*.safetensors`; `model.selection`), and each file is downloaded to a temporary folder under
$TMPDIR (one file at a time: /tmp only needs the largest file), checked against the Hub's own
hash (LFS sha256, or git blob sha1), uploaded to `DEST/<path>` and deleted. `DEST/dflash-model.json`
(`model.manifest`) is rewritten after every file, so a retried stage resumes: a file the
manifest lists for the same commit, whose object is there with its size, costs no Hub bytes.

Exit codes: 0 done; 2 something the user fixes (gated or private repo without a usable token:
spec.hfTokenSecretRef, unknown repo or revision, no safetensors weights, a DEST holding a
complete copy of another commit); 1 the Hub, the network, a hash mismatch or S3 failed (the
Job retries). The stage result (`--termination-log`) carries revision, files, bytes and
fetchedBytes (bytes downloaded from the Hub by this attempt). The token is never printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflash_trainer.model.digests import HashMismatchError, check_hub_hash, file_digests
from dflash_trainer.model.hub import (
    HubError,
    HubUserError,
    download_file,
    redact,
    resolve_model,
)
from dflash_trainer.model.manifest import (
    MANIFEST_NAME,
    FileEntry,
    ManifestError,
    ModelManifest,
    plan_resume,
)
from dflash_trainer.model.selection import NoSafetensorsError, select_model_files
from dflash_trainer.storage import (
    ObjectStore,
    StorageError,
    is_s3_uri,
    join_uri,
    read_json,
    split_s3_uri,
    store_for,
)
from dflash_trainer.train.result import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    build_stage_result,
    write_stage_result,
)

log = logging.getLogger("dflash_trainer.model.fetch")

STAGE = "model"
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


class FetchInputError(Exception):
    """An argument the stage refuses (exit 2)."""


@dataclass(frozen=True)
class FetchResult:
    manifest: ModelManifest
    fetched_files: int
    fetched_bytes: int
    reused_files: int

    @property
    def total_bytes(self) -> int:
        return self.manifest.total_bytes


def check_model_id(model: str) -> str:
    if not HUB_ID.match(model) or "--" in model or ".." in model:
        raise FetchInputError(
            f"--model {model!r} is not a Hub model id; accepted: ORG/NAME such as Qwen/Qwen3-8B "
            "(an s3:// or local model needs no model stage)"
        )
    return model


def check_dest(dest: str) -> str:
    if is_s3_uri(dest):
        try:
            _bucket, key = split_s3_uri(dest)
        except StorageError as exc:
            raise FetchInputError(f"--dest: {exc}") from None
        if not key.strip("/"):
            raise FetchInputError(
                f"--dest {dest!r} is a whole bucket; accepted: s3://<bucket>/<prefix>"
            )
    elif "://" in dest:
        raise FetchInputError(
            f"--dest {dest!r} is not accepted: use s3://<bucket>/<prefix> or a folder"
        )
    return dest.rstrip("/")


def read_manifest(uri: str) -> ModelManifest | None:
    store = store_for(uri)
    if not store.exists(uri):
        return None
    try:
        data = read_json(uri)
    except StorageError as exc:
        if "is not valid JSON" in str(exc):  # a broken file, not a store failure (exit 2)
            raise ManifestError(str(exc)) from None
        raise
    return ModelManifest.from_json(data, where=uri)


def write_manifest(store: ObjectStore, uri: str, manifest: ModelManifest) -> None:
    """One PUT (S3) or an atomic rename (folder): a reader sees the old or the new manifest."""
    store.write_bytes(uri, json.dumps(manifest.to_json(), indent=2).encode() + b"\n")


def _objects(store: ObjectStore, dest: str) -> dict[str, int]:
    prefix = dest + "/"
    return {o.uri[len(prefix) :]: o.size for o in store.list(prefix) if o.uri.startswith(prefix)}


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _download_order(paths: list[str]) -> list[str]:
    """Configs and tokenizer first (a failing token shows in seconds), then the weights."""
    return sorted(paths, key=lambda p: (p.endswith(".safetensors"), p))


def fetch_model(
    model: str,
    revision: str | None,
    dest: str,
    work_dir: Path,
) -> FetchResult:
    """Copy `model`@`revision` into `dest`, resuming from its manifest; see the module doc."""
    hub = resolve_model(model, revision)
    try:
        selected = select_model_files(hub.files, model)
    except NoSafetensorsError as exc:
        raise FetchInputError(str(exc)) from None
    sizes = {path: hub.files[path].size for path in selected}
    store = store_for(dest)
    manifest_uri = join_uri(dest, MANIFEST_NAME)
    existing = read_manifest(manifest_uri)
    plan = plan_resume(existing, model, hub.commit, sizes, _objects(store, dest), manifest_uri)
    if plan.restart:
        assert existing is not None
        log.warning(
            "%s holds an unfinished copy of %s@%s: starting over for %s@%s",
            manifest_uri,
            existing.model,
            existing.revision,
            model,
            hub.commit,
        )
    for path in sorted(plan.stale):
        store.delete(join_uri(dest, path))
    manifest = ModelManifest(
        model=model,
        revision=hub.commit,
        requested_revision=revision,
        total_bytes=sum(sizes.values()),
        files=[f for f in (existing.files if existing else []) if f.path in plan.done],
        complete=len(plan.done) == len(selected),
    )
    if existing is None or manifest.to_json() != existing.to_json():
        write_manifest(store, manifest_uri, manifest)
    log.info(
        "%s@%s (commit %s): %d files, %s; %d already in %s",
        model,
        revision or "default branch",
        hub.commit,
        len(selected),
        _size(manifest.total_bytes),
        len(plan.done),
        dest,
    )
    fetched_files = fetched_bytes = 0
    todo = [p for p in _download_order(selected) if p not in plan.done]
    for index, path in enumerate(todo, start=1):
        started = time.monotonic()
        folder = Path(tempfile.mkdtemp(prefix="files-", dir=work_dir))
        try:
            local = download_file(hub, path, folder, work_dir / "hf-cache")
            downloaded = time.monotonic() - started
            digests = file_digests(local)
            fetched_files += 1
            fetched_bytes += digests.size
            expected = hub.files[path]
            if digests.size != expected.size:
                raise HashMismatchError(
                    f"{path}: size mismatch: the Hub lists {expected.size} bytes, the download "
                    f"has {digests.size}; nothing was recorded for this file"
                )
            check_hub_hash(path, expected.expected, digests)
            store.upload_file(local, join_uri(dest, path))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        manifest.record(FileEntry(path, digests.size, digests.sha256))
        manifest.complete = len(manifest.files) == len(selected)
        write_manifest(store, manifest_uri, manifest)
        took = time.monotonic() - started
        log.info(
            "model %d/%d: %s, %s from the Hub in %.1f s (%s/s), %s ok, stored in %.1f s",
            index,
            len(todo),
            path,
            _size(digests.size),
            downloaded,
            _size(digests.size / max(downloaded, 1e-6)),
            expected.expected.kind,
            took - downloaded,
        )
    return FetchResult(manifest, fetched_files, fetched_bytes, len(plan.done))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dflash_trainer.model.fetch",
        description="Copy a Hugging Face Hub model into the run root once, verified file by file.",
    )
    parser.add_argument("--model", required=True, help="Hub model id, e.g. Qwen/Qwen3.6-27B")
    parser.add_argument(
        "--revision", default=None, help="branch, tag or commit (default: the default branch)"
    )
    parser.add_argument("--dest", required=True, help="s3://bucket/prefix/.../model or a folder")
    parser.add_argument(
        "--termination-log",
        default=None,
        help="where to write the stage result JSON (default: /dev/termination-log if it exists)",
    )
    return parser.parse_args(argv)


def _result(ok: bool, message: str, **extra: Any) -> dict[str, Any]:
    return build_stage_result(STAGE, ok, redact(message), **extra)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    from huggingface_hub.utils.tqdm import disable_progress_bars

    # One log line per file instead of a progress bar per chunk and a line per HTTP request.
    disable_progress_bars()
    for name in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    work_dir = Path(tempfile.mkdtemp(prefix="dflash-model-"))
    code = EXIT_OK
    try:
        result = fetch_model(
            check_model_id(args.model), args.revision, check_dest(args.dest), work_dir
        )
    except (FetchInputError, HubUserError, ManifestError) as exc:
        message, code = str(exc), EXIT_BAD_INPUT
    except (HubError, HashMismatchError) as exc:
        message, code = str(exc), EXIT_FAILED
    except StorageError as exc:
        from dflash_trainer.data.errors import is_user_fixable

        message = f"copying {args.model} to {args.dest} failed: {exc}"
        code = EXIT_BAD_INPUT if is_user_fixable(exc) else EXIT_FAILED
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    if code != EXIT_OK:
        log.error("%s", redact(message))
        write_stage_result(args.termination_log, _result(False, message, model=args.model))
        return code
    manifest = result.manifest
    message = (
        f"{args.model}@{manifest.revision}: {len(manifest.files)} files, "
        f"{_size(manifest.total_bytes)} in {args.dest}; {_size(result.fetched_bytes)} from the "
        f"Hub this attempt ({result.reused_files} files already there)"
    )
    log.info("%s", message)
    write_stage_result(
        args.termination_log,
        _result(
            True,
            message,
            revision=manifest.revision,
            files=len(manifest.files),
            bytes=manifest.total_bytes,
            fetchedBytes=result.fetched_bytes,
        ),
    )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
