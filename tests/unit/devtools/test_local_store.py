"""The local-folder object store behaves like S3 for the pipeline: atomic writes, listings."""

from __future__ import annotations

from pathlib import Path

import pytest
from dflash_trainer.storage import (
    StorageError,
    join_uri,
    read_json,
    split_s3_uri,
    store_for,
    write_json,
)


def test_local_store_round_trips_and_lists_sorted(tmp_path: Path) -> None:
    root = str(tmp_path / "run")
    store = store_for(root)
    store.write_bytes(join_uri(root, "b/2.bin"), b"22")
    store.write_bytes(join_uri(root, "a/1.bin"), b"1")
    write_json(join_uri(root, "a/meta.json"), {"k": 1})
    assert [(Path(o.uri).name, o.size) for o in store.list(root)] == [
        ("1.bin", 1),
        ("meta.json", len(Path(root, "a", "meta.json").read_bytes())),
        ("2.bin", 2),
    ]
    assert read_json(join_uri(root, "a/meta.json")) == {"k": 1}
    assert store.delete_prefix(join_uri(root, "a")) == 2
    assert [Path(o.uri).name for o in store.list(root)] == ["2.bin"]


def test_missing_object_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"does not exist"):
        store_for(str(tmp_path)).read_bytes(str(tmp_path / "nope.json"))


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(StorageError, match=r"bad\.json is not valid JSON"):
        read_json(str(bad))


@pytest.mark.parametrize("uri", ["s3://", "s3:///key", "gs://bucket/key"])
def test_s3_uri_without_a_bucket_is_refused(uri: str) -> None:
    with pytest.raises(StorageError, match="expected s3://<bucket>/<key>"):
        split_s3_uri(uri)


def test_s3_uri_splits_into_bucket_and_key() -> None:
    assert split_s3_uri("s3://bucket/a/b.json") == ("bucket", "a/b.json")
