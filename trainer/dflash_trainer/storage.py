"""One object-store API over `s3://bucket/key` URIs and local paths.

Stages, the trainer and the tests read and write run artifacts through `store_for(uri)`,
so the same code runs against S3 in a cluster and against a local folder in a debug run.
S3 settings come from the environment (never from the DFlashRun spec):

    AWS_ENDPOINT_URL        S3 endpoint (unset: AWS)        AWS_REGION / AWS_DEFAULT_REGION
    AWS_ACCESS_KEY_ID       from the run's Secret            AWS_SECRET_ACCESS_KEY
    DFLASH_S3_PATH_STYLE    "true" (default) or "false": path-style addressing for MinIO/SeaweedFS/Ceph
    AWS_MAX_ATTEMPTS        attempts per request, the first included (default: 8 retries)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol
from urllib.parse import urlparse

# Multipart settings: 64 MiB parts keep a 10 GB checkpoint under S3's 10,000-part limit,
# and 8 concurrent parts saturate a pod's NIC without starving the training step.
MULTIPART_THRESHOLD = 64 * 1024 * 1024
MULTIPART_CHUNK = 64 * 1024 * 1024
MAX_CONCURRENCY = 8
# botocore's "standard" retry mode retries throttling, 5xx and connection errors with backoff
# (AWS_MAX_ATTEMPTS overrides the count, as it does for the AWS CLI).
MAX_ATTEMPTS = 8
HASH_BLOCK = 4 * 1024 * 1024


class StorageError(Exception):
    """A user-visible storage failure: names the URI and what went wrong."""


@dataclass(frozen=True)
class ObjectInfo:
    uri: str
    size: int


class ObjectStore(Protocol):
    def read_bytes(self, uri: str) -> bytes: ...
    def write_bytes(self, uri: str, data: bytes) -> None: ...
    def open_read(self, uri: str) -> IO[bytes]: ...
    def upload_file(self, path: Path, uri: str) -> None: ...
    def download_file(self, uri: str, path: Path) -> None: ...
    def exists(self, uri: str) -> bool: ...
    def list(self, prefix: str) -> list[ObjectInfo]: ...
    def delete(self, uri: str) -> None: ...
    def delete_prefix(self, prefix: str) -> int: ...


def is_s3_uri(uri: str) -> bool:
    return uri.startswith("s3://")


def split_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> (`bucket`, `a/b`); a clear error when there is no bucket."""
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise StorageError(f"{uri!r} is not an S3 URI; expected s3://<bucket>/<key>")
    return parsed.netloc, parsed.path.lstrip("/")


def join_uri(base: str, *parts: str) -> str:
    """Join URI or path segments with exactly one `/` between them."""
    out = base.rstrip("/")
    for part in parts:
        if part:
            out = f"{out}/{part.strip('/')}"
    return out


def local_path(uri: str) -> Path:
    return Path(uri[len("file://") :] if uri.startswith("file://") else uri)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _os_error(action: str, uri: str, exc: OSError) -> StorageError:
    """`writing /x/y failed: No space left on device`: the path and the cause, in one line."""
    if isinstance(exc, FileNotFoundError) and action == "reading":
        return StorageError(f"{uri} does not exist")
    cause = exc.strerror or type(exc).__name__
    where = (
        f" ({exc.filename})" if exc.filename and str(exc.filename) != str(local_path(uri)) else ""
    )
    return StorageError(f"{action} {uri} failed: {cause}{where}")


class LocalStore:
    """Local folder as an object store; writes are atomic (temp file + rename).

    Every OSError (a full disk, a read-only or missing folder, a permission) becomes a
    StorageError naming the path and the cause, as the S3 store's failures do.
    """

    def read_bytes(self, uri: str) -> bytes:
        try:
            return local_path(uri).read_bytes()
        except IsADirectoryError:
            raise StorageError(f"{uri} is a directory, expected a file") from None
        except OSError as exc:
            raise _os_error("reading", uri, exc) from None

    def _write_atomically(self, uri: str, action: str, fill: Any) -> None:
        path = local_path(uri)
        tmp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            with os.fdopen(fd, "wb") as handle:
                fill(handle)
            Path(tmp).replace(path)
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise _os_error(action, uri, exc) from None

    def write_bytes(self, uri: str, data: bytes) -> None:
        self._write_atomically(uri, "writing", lambda handle: handle.write(data))

    def open_read(self, uri: str) -> IO[bytes]:
        try:
            return local_path(uri).open("rb")
        except OSError as exc:
            raise _os_error("reading", uri, exc) from None

    def upload_file(self, path: Path, uri: str) -> None:
        def copy(handle: IO[bytes]) -> None:
            with path.open("rb") as source:
                shutil.copyfileobj(source, handle, HASH_BLOCK)

        self._write_atomically(uri, "uploading", copy)

    def download_file(self, uri: str, path: Path) -> None:
        src = local_path(uri)
        if not src.is_file():
            raise StorageError(f"{uri} does not exist")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, path)
        except OSError as exc:
            raise _os_error(f"downloading to {path} from", uri, exc) from None

    def exists(self, uri: str) -> bool:
        return local_path(uri).is_file()

    def list(self, prefix: str) -> list[ObjectInfo]:
        root = local_path(prefix)
        try:
            if root.is_file():
                return [ObjectInfo(str(root), root.stat().st_size)]
            if not root.is_dir():
                return []
            files = sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
            return [ObjectInfo(str(p), p.stat().st_size) for p in files]
        except OSError as exc:
            raise _os_error("listing", prefix, exc) from None

    def delete(self, uri: str) -> None:
        try:
            local_path(uri).unlink(missing_ok=True)
        except OSError as exc:
            raise _os_error("deleting", uri, exc) from None

    def delete_prefix(self, prefix: str) -> int:
        objects = self.list(prefix)
        for obj in objects:
            self.delete(obj.uri)
        root = local_path(prefix)
        if root.is_dir():
            shutil.rmtree(root, ignore_errors=True)
        return len(objects)


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str | None
    region: str
    path_style: bool
    # AWS_CA_BUNDLE (on-prem S3 with a private CA): boto3 reads it when the client is made.
    ca_bundle: str | None = None
    # Part of the identity (a changed Secret means a new client), never printed.
    credentials_digest: str = field(default="", repr=False)

    @classmethod
    def from_env(cls) -> S3Settings:
        style = os.environ.get("DFLASH_S3_PATH_STYLE", "true").strip().lower()
        if style not in {"true", "false", "1", "0"}:
            raise StorageError(
                f"DFLASH_S3_PATH_STYLE={style!r} is invalid; accepted: true or false"
            )
        return cls(
            endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
            region=os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1",
            path_style=style in {"true", "1"},
            ca_bundle=os.environ.get("AWS_CA_BUNDLE") or None,
            credentials_digest=sha256_bytes(
                "\0".join(
                    os.environ.get(k, "")
                    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
                ).encode()
            ),
        )


def s3_error(
    uri: str, action: str, exc: BaseException, endpoint: str | None = None
) -> StorageError:
    """The one-line StorageError for a failed S3 request on `uri` (botocore's ClientError and
    BotoCoreError, boto3's transfer errors): the object, the credentials, or the server (full,
    down, unreachable) and what to do (`s3_errors`). `endpoint`: default AWS_ENDPOINT_URL."""
    from dflash_trainer import s3_errors

    endpoint = endpoint if endpoint is not None else os.environ.get("AWS_ENDPOINT_URL") or None
    exc = s3_errors.unwrap(exc)
    answer = s3_errors.answer_of(exc)
    if answer is None:
        return StorageError(s3_errors.describe_transport(action, uri, endpoint, exc))
    code = answer.code
    if code in {"NoSuchKey", "404", "NotFound"}:
        return StorageError(f"{uri} does not exist")
    if code == "NoSuchBucket":
        return StorageError(f"bucket of {uri} does not exist")
    if code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"}:
        return StorageError(f"access to {uri} was refused ({code}): check the credentials Secret")
    return StorageError(s3_errors.describe_answer(action, uri, endpoint, answer))


def retry_settings() -> dict[str, Any]:
    """botocore's retries: standard mode, MAX_ATTEMPTS retries, or AWS_MAX_ATTEMPTS attempts in
    all (its meaning for the AWS CLI and SDKs) when that is a whole number of at least 1."""
    raw = os.environ.get("AWS_MAX_ATTEMPTS", "").strip()
    if raw.isdigit() and int(raw) >= 1:
        return {"total_max_attempts": int(raw), "mode": "standard"}
    return {"max_attempts": MAX_ATTEMPTS, "mode": "standard"}


def s3_client(settings: S3Settings, max_pool_connections: int) -> Any:
    """A boto3 S3 client for `settings` with standard retries and `max_pool_connections`
    HTTP connections (at least the number of threads that share it)."""
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=settings.region,
        retries=retry_settings(),
        s3={"addressing_style": "path" if settings.path_style else "auto"},
        max_pool_connections=max_pool_connections,
    )
    # A session of its own: boto3's default session caches the first credentials it
    # resolves, so a rotated Secret would never be picked up.
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=settings.endpoint_url, config=config)


class S3Store:
    """S3 through boto3: multipart, parallel transfers and standard retries."""

    def __init__(self, settings: S3Settings | None = None) -> None:
        from boto3.s3.transfer import TransferConfig

        self.settings = settings or S3Settings.from_env()
        self.client: Any = s3_client(self.settings, MAX_CONCURRENCY * 2)
        self.transfer = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD,
            multipart_chunksize=MULTIPART_CHUNK,
            max_concurrency=MAX_CONCURRENCY,
            use_threads=True,
        )

    def _call(self, uri: str, action: str, fn: Any, **kwargs: Any) -> Any:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except (ClientError, BotoCoreError, Boto3Error) as exc:
            raise s3_error(uri, action, exc, self.settings.endpoint_url or "") from None

    def read_bytes(self, uri: str) -> bytes:
        bucket, key = split_s3_uri(uri)
        body = self._call(uri, "reading", self.client.get_object, Bucket=bucket, Key=key)["Body"]
        data: bytes = body.read()
        return data

    def write_bytes(self, uri: str, data: bytes) -> None:
        bucket, key = split_s3_uri(uri)
        self._call(uri, "writing", self.client.put_object, Bucket=bucket, Key=key, Body=data)

    def open_read(self, uri: str) -> IO[bytes]:
        bucket, key = split_s3_uri(uri)
        body: IO[bytes] = self._call(
            uri, "reading", self.client.get_object, Bucket=bucket, Key=key
        )["Body"]
        return body

    def upload_file(self, path: Path, uri: str) -> None:
        bucket, key = split_s3_uri(uri)
        self._call(
            uri,
            "uploading",
            self.client.upload_file,
            Filename=str(path),
            Bucket=bucket,
            Key=key,
            Config=self.transfer,
        )

    def download_file(self, uri: str, path: Path) -> None:
        bucket, key = split_s3_uri(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._call(
            uri,
            "downloading",
            self.client.download_file,
            Bucket=bucket,
            Key=key,
            Filename=str(path),
            Config=self.transfer,
        )

    def exists(self, uri: str) -> bool:
        try:
            bucket, key = split_s3_uri(uri)
            self._call(uri, "checking", self.client.head_object, Bucket=bucket, Key=key)
        except StorageError as exc:
            if str(exc).endswith("does not exist"):
                return False
            raise
        return True

    def _iter(self, prefix: str) -> Iterator[ObjectInfo]:
        bucket, key = split_s3_uri(prefix)
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call(prefix, "listing", paginator.paginate, Bucket=bucket, Prefix=key)
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            for page in pages:
                for item in page.get("Contents", []):
                    yield ObjectInfo(f"s3://{bucket}/{item['Key']}", int(item["Size"]))
        except (ClientError, BotoCoreError) as exc:
            raise s3_error(prefix, "listing", exc, self.settings.endpoint_url or "") from None

    def list(self, prefix: str) -> list[ObjectInfo]:
        return sorted(self._iter(prefix), key=lambda o: o.uri)

    def delete(self, uri: str) -> None:
        bucket, key = split_s3_uri(uri)
        self._call(uri, "deleting", self.client.delete_object, Bucket=bucket, Key=key)

    def delete_prefix(self, prefix: str) -> int:
        bucket, _ = split_s3_uri(prefix)
        objects = self.list(prefix)
        batch_size = 1000  # the DeleteObjects API limit
        for start in range(0, len(objects), batch_size):
            keys = [{"Key": split_s3_uri(o.uri)[1]} for o in objects[start : start + batch_size]]
            self._call(
                prefix,
                "deleting",
                self.client.delete_objects,
                Bucket=bucket,
                Delete={"Objects": keys, "Quiet": True},
            )
        return len(objects)


_S3: S3Store | None = None
_LOCAL = LocalStore()


def store_for(uri: str) -> ObjectStore:
    """The store that serves `uri`: S3 for `s3://`, the local filesystem otherwise."""
    global _S3
    if is_s3_uri(uri):
        if _S3 is None or _S3.settings != S3Settings.from_env():
            _S3 = S3Store()
        return _S3
    return _LOCAL


def read_json(uri: str) -> Any:
    data = store_for(uri).read_bytes(uri)
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StorageError(f"{uri} is not valid JSON: {exc}") from None


def write_json(uri: str, value: Any) -> None:
    store_for(uri).write_bytes(uri, json.dumps(value, indent=2, sort_keys=True).encode() + b"\n")


def arrow_filesystem(uri: str) -> tuple[Any, str]:
    """A `(pyarrow.fs.FileSystem, path)` pair for streaming Parquet/Arrow reads of `uri`."""
    from pyarrow import fs

    if not is_s3_uri(uri):
        return fs.LocalFileSystem(), str(local_path(uri))
    bucket, key = split_s3_uri(uri)
    settings = S3Settings.from_env()
    endpoint = settings.endpoint_url
    scheme = "https"
    if endpoint:
        parsed = urlparse(endpoint)
        scheme = parsed.scheme or "https"
        endpoint = parsed.netloc or parsed.path
    s3 = fs.S3FileSystem(
        access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
        region=settings.region,
        endpoint_override=endpoint,
        scheme=scheme,
        force_virtual_addressing=not settings.path_style,
    )
    return s3, f"{bucket}/{key}"
