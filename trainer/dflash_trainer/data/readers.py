"""Stream rows out of source files (JSONL, .gz/.zst JSONL, Parquet) on S3 or local disk.

Never holds a whole file: JSONL is read line by line through a bounded buffer, Parquet batch by
batch. A bad line becomes a `RawRow` with an error (file:line), never an exception.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from dflash_trainer.data.errors import BadInputError, is_user_fixable
from dflash_trainer.data.records import SampleError
from dflash_trainer.data.uris import to_local_uri
from dflash_trainer.storage import StorageError, arrow_filesystem, store_for

# One sample larger than this is refused (and reported) instead of being buffered: a 4 MiB
# prompt is far past any engine's context, and the cap keeps memory flat on a corrupt file.
MAX_LINE_BYTES = 4 * 1024 * 1024
READ_CHUNK = 1024 * 1024
PARQUET_BATCH_ROWS = 1024
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd")
PARQUET_SUFFIXES = (".parquet",)
ACCEPTED = ".jsonl, .ndjson, .json (JSON lines), each optionally .gz or .zst, and .parquet"


@dataclass(frozen=True)
class RawRow:
    file: str
    line: int  # 1-based line number (JSONL) or row number (Parquet)
    value: Any = None
    error: SampleError | None = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def file_kind(uri: str) -> tuple[str, str | None]:
    """(`jsonl`|`parquet`, compression or None) from the file name; BadInputError when unknown."""
    name = uri.rsplit("/", 1)[-1].lower()
    compression = None
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            compression = "gzip" if suffix == ".gz" else "zstd"
            name = name[: -len(suffix)]
            break
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl", compression
    if name.endswith(PARQUET_SUFFIXES) and compression is None:
        return "parquet", None
    raise BadInputError(f"{uri}: unknown file type; accepted: {ACCEPTED}")


def list_source_files(uri: str) -> list[str]:
    """The files of a source: the object itself, or every data file under a folder/prefix."""
    uri = to_local_uri(uri)
    store = store_for(uri)
    try:
        if store.exists(uri):
            file_kind(uri)
            return [uri]
        prefix = uri if uri.endswith("/") else uri + "/"
        objects = [o.uri for o in store.list(prefix)]
    except StorageError as exc:
        if not is_user_fixable(exc):
            raise
        raise BadInputError(f"source {uri}: {exc}") from None
    files = [u for u in objects if _is_data_file(u)]
    if not files:
        raise BadInputError(f"source {uri} does not exist (no such object, file, folder or prefix)")
    return files


def _is_data_file(uri: str) -> bool:
    try:
        file_kind(uri)
    except BadInputError:
        return False
    return True


class _RawStream(io.RawIOBase):
    """Adapts a `read(n)`-only stream (botocore's StreamingBody) for io.BufferedReader."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


def open_text_lines(uri: str, compression: str | None) -> io.BufferedReader:
    """A buffered, decompressed byte stream of `uri`."""
    raw: Any = io.BufferedReader(_RawStream(store_for(uri).open_read(uri)), READ_CHUNK)
    if compression == "gzip":
        raw = gzip.GzipFile(fileobj=raw)
    elif compression == "zstd":
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    return io.BufferedReader(raw, READ_CHUNK)


def iter_jsonl(uri: str, compression: str | None) -> Iterator[RawRow]:
    """One RawRow per non-blank line; decode errors, invalid UTF-8 and huge lines become errors."""
    try:
        stream = open_text_lines(uri, compression)
    except StorageError as exc:
        if not is_user_fixable(exc):
            raise
        raise BadInputError(f"source file {exc}") from None
    line_no = 0
    try:
        while True:
            line = stream.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            line_no += 1
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                size = len(line) + _skip_rest_of_line(stream)
                yield RawRow(
                    uri,
                    line_no,
                    error=SampleError(
                        "line_too_long",
                        f"line is {size / 1e6:.1f} MB, over the {MAX_LINE_BYTES >> 20} MiB "
                        "limit for one sample",
                    ),
                )
                continue
            if not line.strip():
                continue
            yield _decode_json_line(uri, line_no, line)
    except (OSError, EOFError) as exc:
        raise BadInputError(f"{uri}: cannot read past line {line_no}: {exc}") from None
    finally:
        stream.close()


def _skip_rest_of_line(stream: io.BufferedReader) -> int:
    skipped = 0
    while True:
        chunk = stream.readline(READ_CHUNK)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return skipped


def _decode_json_line(uri: str, line_no: int, line: bytes) -> RawRow:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return RawRow(
            uri, line_no, error=SampleError("invalid_utf8", f"invalid UTF-8 at byte {exc.start}")
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return RawRow(
            uri,
            line_no,
            error=SampleError("malformed_json", f"invalid JSON: {exc.msg} (column {exc.colno})"),
        )
    if not isinstance(value, dict):
        return RawRow(
            uri,
            line_no,
            error=SampleError(
                "schema", f"line is a JSON {type(value).__name__}, expected an object"
            ),
        )
    return RawRow(uri, line_no, value=value)


def iter_parquet(uri: str) -> Iterator[RawRow]:
    """One RawRow per Parquet row, read batch by batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        filesystem, path = arrow_filesystem(uri)
        handle = filesystem.open_input_file(path)
        reader = pq.ParquetFile(handle)
    except (OSError, pa.ArrowException) as exc:
        raise BadInputError(f"{uri}: cannot open as Parquet: {exc}") from None
    row = 0
    batches = reader.iter_batches(batch_size=PARQUET_BATCH_ROWS)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as exc:
            raise BadInputError(f"{uri}: cannot read Parquet after row {row}: {exc}") from None
        for value in batch.to_pylist():
            row += 1
            yield RawRow(uri, row, value=value)


def iter_rows(uri: str) -> Iterator[RawRow]:
    """Every row of every file of a source, in a stable order."""
    for file_uri in list_source_files(uri):
        kind, compression = file_kind(file_uri)
        if kind == "parquet":
            yield from iter_parquet(file_uri)
        else:
            yield from iter_jsonl(file_uri, compression)
