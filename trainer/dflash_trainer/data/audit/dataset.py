"""Find the files of a dataset to audit and stream their record batches, column-pruned.

Accepts one Parquet or Arrow (IPC file or stream, e.g. a HF `save_to_disk` shard) file, or a
folder/prefix of them. A `regen/` folder is read through its shard commit manifests (committed
shards only) and a `tokenized/` folder through `_SUCCESS.json` when present.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from dflash_trainer.data.audit.arrow_ipc import ArrowIpc
from dflash_trainer.data.errors import BadInputError, is_user_fixable
from dflash_trainer.storage import (
    StorageError,
    arrow_filesystem,
    is_s3_uri,
    join_uri,
    local_path,
    store_for,
)

DATA_SUFFIXES = (".parquet", ".arrow")
TOKENIZED_MANIFEST = "_SUCCESS.json"
COMMIT_SUFFIX = ".commit.json"
DEFAULT_BATCH_ROWS = 16384
TOKENS_COLUMNS = ("input_ids", "loss_mask")
COMPLETIONS_COLUMNS = ("response", "finish_reason")


def _read_manifest(uri: str) -> dict[str, object]:
    try:
        data = json.loads(store_for(uri).read_bytes(uri))
    except (StorageError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInputError(f"{uri}: unreadable manifest: {exc}") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{uri}: manifest is not a JSON object")
    return data


def _manifest_files(folder: str, manifest: dict[str, object], where: str) -> list[str]:
    files = manifest.get("files") or manifest.get("shards") or []
    if not isinstance(files, list):
        raise BadInputError(f"{where}: 'files' must be a list")
    out = []
    for entry in files:
        path = entry.get("path") if isinstance(entry, dict) else entry
        if not isinstance(path, str):
            raise BadInputError(f"{where}: a file entry has no 'path'")
        out.append(join_uri(folder, path))
    return out


def resolve_files(path: str) -> list[str]:
    """The data files of `path`, in a stable order; BadInputError when there are none."""
    store = store_for(path)
    try:
        if store.exists(path):
            if not path.endswith(DATA_SUFFIXES):
                raise BadInputError(f"{path}: not a .parquet or .arrow file")
            return [path]
        folder = path.rstrip("/")
        listing = [o.uri for o in store.list(folder + "/")]
    except StorageError as exc:
        if not is_user_fixable(exc):
            raise
        raise BadInputError(f"{path}: {exc}") from None
    names = {u.rsplit("/", 1)[-1]: u for u in listing}
    if TOKENIZED_MANIFEST in names:
        uri = names[TOKENIZED_MANIFEST]
        return _manifest_files(folder, _read_manifest(uri), uri)
    commits = sorted(u for u in listing if u.endswith(COMMIT_SUFFIX))
    if commits:
        return [f for c in commits for f in _manifest_files(folder, _read_manifest(c), c)]
    files = sorted(u for u in listing if u.endswith(DATA_SUFFIXES))
    if not files:
        raise BadInputError(f"{path} does not exist or holds no .parquet/.arrow files")
    return files


def _open_arrow(uri: str) -> ArrowIpc:
    """Local files from a memory map (no copy of the batches), others through Arrow's file
    system (S3), and so is a local file that cannot be mapped (empty, or a file system without
    mmap)."""
    if not is_s3_uri(uri):
        path = local_path(uri)
        if path.is_file() and path.stat().st_size:
            try:
                return ArrowIpc.mapped(path)
            except (OSError, ValueError):
                pass
    filesystem, fpath = arrow_filesystem(uri)
    return ArrowIpc(filesystem.open_input_file(fpath))


def read_schema(uri: str) -> pa.Schema:
    try:
        if uri.endswith(".arrow"):
            return _open_arrow(uri).schema
        filesystem, fpath = arrow_filesystem(uri)
        return pq.ParquetFile(filesystem.open_input_file(fpath)).schema_arrow
    except (OSError, pa.ArrowException) as exc:
        raise BadInputError(f"{uri}: unreadable as Parquet/Arrow: {exc}") from None


def detect_gate(schema: pa.Schema) -> str | None:
    names = set(schema.names)
    if all(c in names for c in TOKENS_COLUMNS):
        return "tokens"
    if all(c in names for c in COMPLETIONS_COLUMNS):
        return "completions"
    return None


def check_columns(uri: str, schema: pa.Schema, required: tuple[str, ...], gate: str) -> None:
    missing = [c for c in required if c not in schema.names]
    if missing:
        raise BadInputError(
            f"{uri}: the {gate} gate needs column(s) {', '.join(missing)}; "
            f"the file has: {', '.join(schema.names)}"
        )


def iter_batches(
    files: list[str],
    columns: list[str],
    batch_rows: int = DEFAULT_BATCH_ROWS,
    use_threads: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Record batches of the named columns (absent optional columns are simply left out)."""
    for uri in files:
        try:
            yield from _file_batches(uri, columns, batch_rows, use_threads)
        except (OSError, pa.ArrowException) as exc:
            if is_transient(exc):  # the store, not the data: exit 1 so that the Job retries
                raise StorageError(f"reading {uri} failed: {exc}") from None
            raise BadInputError(f"{uri}: unreadable as Parquet/Arrow: {exc}") from None


def coalesce(
    batches: Iterator[pa.RecordBatch], min_rows: int
) -> Iterator[pa.RecordBatch | pa.Table]:
    """Join small consecutive batches (HF `save_to_disk` writes 1,000 rows each) into tables
    of at least `min_rows`, without copying: fewer, larger whole-array passes (measured ~15%
    faster). The gates read a table like a batch (`column`, `schema`, `num_rows`)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not pending and batch.num_rows >= min_rows:
            yield batch
            continue
        if pending and batch.schema != pending[0].schema:
            yield _joined(pending)
            pending, rows = [], 0
        pending.append(batch)
        rows += batch.num_rows
        if rows >= min_rows:
            yield _joined(pending)
            pending, rows = [], 0
    if pending:
        yield _joined(pending)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch | pa.Table:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches)


# Arrow's S3 client reports these for an unreachable or overloaded store.
TRANSIENT_MARKERS = (
    "NETWORK_CONNECTION",
    "Could not connect",
    "Connection refused",
    "timed out",
    "SLOW_DOWN",
    "Service Unavailable",
    "INTERNAL_FAILURE",
)


def is_transient(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in TRANSIENT_MARKERS)


def _file_batches(
    uri: str, columns: list[str], batch_rows: int, use_threads: bool
) -> Iterator[pa.RecordBatch]:
    if uri.endswith(".arrow"):
        source = _open_arrow(uri)
        present = [c for c in columns if c in source.schema.names]
        for batch in source.batches():
            yield batch.select(present)
        return
    filesystem, fpath = arrow_filesystem(uri)
    parquet = pq.ParquetFile(filesystem.open_input_file(fpath))
    present = [c for c in columns if c in parquet.schema_arrow.names]
    yield from parquet.iter_batches(batch_size=batch_rows, columns=present, use_threads=use_threads)
