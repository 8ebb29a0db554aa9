"""Parallel ranged GETs of S3 objects into local files.

One GET stream from S3 runs at a few hundred MB/s at best (one TCP connection, one server
disk); a 5 GB weight shard needs many streams at once to fill a node's NIC. Each object is cut
into parts of `part_size` bytes; a pool of `concurrency` threads GETs them with `Range:` and
writes each at its offset with `os.pwrite` (no seek, no shared file position, so no lock and
no reordering queue). Parts of all objects share the one pool, so small files (configs) go in
parallel too. `boto3`'s `download_file` also issues ranged GETs, but funnels every part through
one writer thread and 256 KiB chunks (s3transfer's IO queue); `bench/bench_model_fetch.py`
measures both.

Settings (env, read by `FetchSettings.from_env`):
    DFLASH_MODEL_FETCH_CONCURRENCY   parallel GETs (default 8)
    DFLASH_MODEL_FETCH_PART_SIZE     bytes per ranged GET (default 64Mi; Ki/Mi/Gi suffixes)
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflash_trainer.storage import StorageError, s3_error, split_s3_uri

DEFAULT_CONCURRENCY = 8
DEFAULT_PART_SIZE = 64 * 1024 * 1024
READ_CHUNK = 1024 * 1024
ATTEMPTS = 3  # per part, on top of botocore's own retries of the request
RETRY_SLEEP_SECONDS = 0.5
SIZE = re.compile(r"^\s*(\d+)\s*(Ki|Mi|Gi)?\s*$")
UNITS = {None: 1, "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


class FetchSettingsError(ValueError):
    """An env setting of the fetch that cannot be used (names the variable)."""


def parse_size(name: str, value: str) -> int:
    match = SIZE.match(value)
    if not match or int(match.group(1)) <= 0:
        raise FetchSettingsError(
            f"{name}={value!r} is invalid; accepted: a positive byte count, e.g. 64Mi or 1048576"
        )
    return int(match.group(1)) * UNITS[match.group(2)]


@dataclass(frozen=True)
class FetchSettings:
    concurrency: int = DEFAULT_CONCURRENCY
    part_size: int = DEFAULT_PART_SIZE

    @classmethod
    def from_env(cls) -> FetchSettings:
        raw = os.environ.get("DFLASH_MODEL_FETCH_CONCURRENCY", str(DEFAULT_CONCURRENCY))
        if not raw.strip().isdigit() or int(raw) < 1:
            raise FetchSettingsError(
                f"DFLASH_MODEL_FETCH_CONCURRENCY={raw!r} is invalid; accepted: an integer >= 1"
            )
        part = parse_size(
            "DFLASH_MODEL_FETCH_PART_SIZE",
            os.environ.get("DFLASH_MODEL_FETCH_PART_SIZE", str(DEFAULT_PART_SIZE)),
        )
        return cls(int(raw), part)


@dataclass(frozen=True)
class ObjectJob:
    """Download `uri` (`size` bytes) to `path`; `done(job)` runs once it is all written."""

    uri: str
    size: int
    path: Path


@dataclass
class _Open:
    job: ObjectJob
    fd: int
    parts_left: int


@dataclass
class Counters:
    bytes: int = 0
    requests: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, nbytes: int, requests: int = 0) -> None:
        with self._lock:
            self.bytes += nbytes
            self.requests += requests


def part_ranges(size: int, part_size: int) -> list[tuple[int, int]]:
    """Inclusive byte ranges covering `size` bytes in parts of at most `part_size`."""
    return [(start, min(start + part_size, size) - 1) for start in range(0, size, part_size)]


class RangedFetcher:
    """Download S3 objects with parallel ranged GETs; one client and pool for many objects."""

    def __init__(self, client: Any, settings: FetchSettings) -> None:
        self.client = client
        self.settings = settings
        self.counters = Counters()

    def _get_part(self, entry: _Open, start: int, end: int) -> None:
        """GET bytes start..end of the entry's object into its file; a broken stream is retried
        from the part's start (botocore retries the request itself, not a body cut midway)."""
        from botocore.exceptions import ClientError

        job = entry.job
        bucket, key = split_s3_uri(job.uri)
        for attempt in range(1, ATTEMPTS + 1):
            offset = start
            try:
                response = self.client.get_object(
                    Bucket=bucket, Key=key, Range=f"bytes={start}-{end}"
                )
                self.counters.add(0, requests=1)
                total = str(response.get("ContentRange", "")).rsplit("/", 1)[-1]
                if total.isdigit() and int(total) != job.size:
                    raise StorageError(
                        f"{job.uri} changed while it was downloaded: {total} bytes, "
                        f"listed with {job.size}"
                    )
                body = response["Body"]
                while chunk := body.read(READ_CHUNK):
                    os.pwrite(entry.fd, chunk, offset)
                    offset += len(chunk)
                    self.counters.add(len(chunk))
                if offset != end + 1:
                    raise OSError(f"short read: {offset - start} of {end + 1 - start} bytes")
                return
            except StorageError:
                raise
            except ClientError as exc:
                raise s3_error(job.uri, "downloading", exc) from None
            except Exception as exc:  # a stream cut midway, a timeout, a full disk
                if attempt == ATTEMPTS:
                    raise StorageError(
                        f"downloading {job.uri} (bytes {start}-{end}) failed after {ATTEMPTS} "
                        f"attempts: {exc}"
                    ) from None
                time.sleep(RETRY_SLEEP_SECONDS * attempt)

    def fetch(self, jobs: list[ObjectJob], done: Callable[[ObjectJob], None]) -> None:
        """Download every job; `done(job)` runs in a worker thread as soon as a job's last part
        is written (its file closed). The first failure cancels what has not started and is
        raised; files of unfinished jobs are left for the caller to delete."""
        lock = threading.Lock()
        opened: list[_Open] = []

        def finish(entry: _Open) -> None:
            with lock:
                entry.parts_left -= 1
                last = entry.parts_left == 0
            if last:
                os.close(entry.fd)
                entry.fd = -1
                done(entry.job)

        def run_part(entry: _Open, start: int, end: int) -> None:
            self._get_part(entry, start, end)
            finish(entry)

        futures: list[Future[None]] = []
        with ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="ranged-get") as pool:
            try:
                for job in jobs:
                    job.path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(job.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    ranges = part_ranges(job.size, self.settings.part_size)
                    entry = _Open(job, fd, max(1, len(ranges)))
                    opened.append(entry)
                    os.ftruncate(fd, job.size)
                    if not ranges:  # an empty file: nothing to GET
                        futures.append(pool.submit(finish, entry))
                    for start, end in ranges:
                        futures.append(pool.submit(run_part, entry, start, end))
                finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = next((f.exception() for f in finished if f.exception() is not None), None)
                if failed is not None:
                    raise failed
            finally:
                # Nothing may write to a file descriptor after it is closed (a reused number
                # would be another file): stop what has not started, wait for the rest.
                for future in futures:
                    future.cancel()
                wait(futures)
                for entry in opened:
                    if entry.fd >= 0:
                        os.close(entry.fd)
                        entry.fd = -1
