"""Checkpoints in S3 (or a local folder), committed atomically, resumed exactly.

    <checkpoints>/step-000012000/
        drafter.safetensors   full drafter weights (float32)
        optim.pt              full optimizer state (keys are parameter names)
        rng.pt                every rank's torch / CUDA / numpy / python RNG states
        state.json            step, data position, scheduler, loss, world size, config,
                              the likelihood monitor's per-source totals
        COMMITTED.json        written LAST: {step, time, files: [{path, sha256, bytes}]}

A checkpoint exists only once `COMMITTED.json` does. Resume takes the newest committed one
whose files match their hashes; a partial or corrupted one is skipped with a warning.
Rank 0 writes the files to a local staging folder (fast), then a background thread
uploads them (multipart, parallel, retried by the store) and commits, so training only
waits for the staging; the next save waits for the previous upload. The newest
`keep_last` committed checkpoints are kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from dflash_trainer.storage import StorageError, join_uri, sha256_file, store_for

log = logging.getLogger(__name__)

COMMIT_FILE = "COMMITTED.json"
WEIGHTS_FILE = "drafter.safetensors"
OPTIM_FILE = "optim.pt"
RNG_FILE = "rng.pt"
STATE_FILE = "state.json"
CHECKPOINT_FILES = (WEIGHTS_FILE, OPTIM_FILE, RNG_FILE, STATE_FILE)
STEP_DIR = re.compile(r"step-(\d{9})/")
# Files of one checkpoint upload in parallel (each is itself multipart).
UPLOAD_THREADS = 4


def step_dir_name(step: int) -> str:
    return f"step-{step:09d}"


def capture_rng_state() -> dict[str, Any]:
    # Plain tensors, ints and tuples only, so the file loads with `weights_only=True`.
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (kind, torch.from_numpy(np.asarray(keys, dtype=np.int64)), pos, has_gauss, cached),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


@dataclass(frozen=True)
class CommittedCheckpoint:
    """A verified checkpoint, downloaded into `folder`."""

    step: int
    uri: str
    folder: Path
    state: dict[str, Any]
    commit_sha256: str

    def weights(self) -> dict[str, torch.Tensor]:
        return load_file(str(self.folder / WEIGHTS_FILE))

    def optimizer(self) -> dict[str, Any]:
        state: dict[str, Any] = torch.load(
            self.folder / OPTIM_FILE, map_location="cpu", weights_only=True
        )
        return state

    def rng(self) -> list[dict[str, Any]]:
        states: list[dict[str, Any]] = torch.load(
            self.folder / RNG_FILE, map_location="cpu", weights_only=True
        )
        return states


def write_checkpoint_files(
    folder: Path,
    *,
    weights: dict[str, torch.Tensor],
    optimizer: dict[str, Any],
    rng: list[dict[str, Any]],
    state: dict[str, Any],
) -> None:
    """Stage the checkpoint's files locally (rank 0)."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / WEIGHTS_FILE))
    torch.save(optimizer, folder / OPTIM_FILE)
    torch.save(rng, folder / RNG_FILE)
    (folder / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


def build_commit_record(step: int, files: list[dict[str, Any]]) -> dict[str, Any]:
    return {"step": step, "time": datetime.now(UTC).isoformat(), "files": files}


def list_checkpoint_steps(root: str) -> tuple[list[int], list[int]]:
    """(committed steps, steps with files but no commit record), each ascending."""
    seen: set[int] = set()
    committed: set[int] = set()
    prefix = root.rstrip("/") + "/"
    for obj in store_for(root).list(prefix):
        match = STEP_DIR.match(obj.uri.removeprefix(prefix))
        if not match:
            continue
        step = int(match.group(1))
        seen.add(step)
        if obj.uri.endswith("/" + COMMIT_FILE):
            committed.add(step)
    return sorted(committed), sorted(seen - committed)


def fetch_verified(root: str, step: int, dest: Path) -> CommittedCheckpoint:
    """Download one checkpoint and check every file against `COMMITTED.json`."""
    uri = join_uri(root, step_dir_name(step))
    store = store_for(uri)
    commit_bytes = store.read_bytes(join_uri(uri, COMMIT_FILE))
    record = json.loads(commit_bytes)
    listed = {f["path"]: f for f in record.get("files", [])}
    missing = [name for name in CHECKPOINT_FILES if name not in listed]
    if missing:
        raise StorageError(f"{uri}/{COMMIT_FILE} does not list {', '.join(missing)}")
    dest.mkdir(parents=True, exist_ok=True)
    for name, entry in listed.items():
        local = dest / name
        store.download_file(join_uri(uri, name), local)
        digest = sha256_file(local)
        if digest != entry["sha256"]:
            raise StorageError(
                f"{join_uri(uri, name)} has sha256 {digest[:12]}..., "
                f"{COMMIT_FILE} says {entry['sha256'][:12]}..."
            )
    state = json.loads((dest / STATE_FILE).read_text())
    return CommittedCheckpoint(step, uri, dest, state, hashlib.sha256(commit_bytes).hexdigest())


def find_latest_checkpoint(root: str, dest: Path) -> CommittedCheckpoint | None:
    """The newest committed checkpoint that verifies; older ones are tried after a warning."""
    committed, partial = list_checkpoint_steps(root)
    for step in partial:
        log.warning(
            "checkpoint %s has no %s (an interrupted save); ignoring it",
            join_uri(root, step_dir_name(step)),
            COMMIT_FILE,
        )
    for step in reversed(committed):
        target = dest / step_dir_name(step)
        try:
            return fetch_verified(root, step, target)
        except (StorageError, json.JSONDecodeError, KeyError, OSError) as exc:
            log.warning(
                "checkpoint %s is unusable (%s); falling back to an older one",
                join_uri(root, step_dir_name(step)),
                exc,
            )
            shutil.rmtree(target, ignore_errors=True)
    return None


def prune_checkpoints(root: str, keep_last: int) -> list[int]:
    """Delete all but the newest `keep_last` committed checkpoints, and partial ones older
    than the newest commit; returns the deleted steps."""
    committed, partial = list_checkpoint_steps(root)
    if not committed:
        return []
    doomed = committed[:-keep_last] + [s for s in partial if s < committed[-1]]
    for step in doomed:
        store_for(root).delete_prefix(join_uri(root, step_dir_name(step)) + "/")
    return sorted(doomed)


class CheckpointUploader:
    """Uploads staged checkpoints in a background thread, one at a time (rank 0 only)."""

    def __init__(
        self, root: str, keep_last: int, on_commit: Callable[[int, str, str], None] | None = None
    ) -> None:
        self.root = root
        self.keep_last = keep_last
        self.on_commit = on_commit
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_committed: tuple[int, str, str] | None = None

    def submit(self, folder: Path, step: int) -> None:
        """Upload `folder` as `step` in the background (waits for the previous upload).

        A previous upload that failed (after the store's retries) is a warning here: training
        goes on and this checkpoint tries again. Only `wait()` at the end raises.
        """
        try:
            self.wait()
        except (StorageError, OSError) as exc:
            log.warning(
                "a checkpoint upload failed (%s); training continues, step %d retries", exc, step
            )
        self._thread = threading.Thread(
            target=self._run, args=(folder, step), name=f"checkpoint-{step}", daemon=True
        )
        self._thread.start()

    def wait(self) -> None:
        """Block until the pending upload finished; re-raise its failure."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run(self, folder: Path, step: int) -> None:
        try:
            self.last_committed = self.upload_and_commit(folder, step)
            if self.on_commit:
                self.on_commit(*self.last_committed)
        except BaseException as exc:  # surfaced to the training thread by wait()
            self._error = exc
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def upload_and_commit(self, folder: Path, step: int) -> tuple[int, str, str]:
        uri = join_uri(self.root, step_dir_name(step))
        store = store_for(uri)

        def hash_and_upload(name: str) -> dict[str, Any]:
            # Hashing in the upload threads overlaps it with the other files' transfers.
            entry = {
                "path": name,
                "sha256": sha256_file(folder / name),
                "bytes": (folder / name).stat().st_size,
            }
            store.upload_file(folder / name, join_uri(uri, name))
            return entry

        with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
            record = build_commit_record(step, list(pool.map(hash_and_upload, CHECKPOINT_FILES)))
        commit_bytes = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        store.write_bytes(join_uri(uri, COMMIT_FILE), commit_bytes)  # last: the commit point
        deleted = prune_checkpoints(self.root, self.keep_last)
        log.info(
            "checkpoint step %d committed to %s%s",
            step,
            uri,
            f" (pruned {deleted})" if deleted else "",
        )
        return step, uri, hashlib.sha256(commit_bytes).hexdigest()


def staging_folder(step: int) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"dflash-ckpt-{step}-"))
