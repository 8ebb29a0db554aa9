"""The S3 server is real: objects, multipart uploads, listings and authentication."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError
from dflash_dev.pytest_plugin import S3Handle
from dflash_trainer.storage import StorageError, store_for

FIFTY_MB = 50 * 1024 * 1024


def test_put_get_and_listing_round_trip(s3: S3Handle) -> None:
    client = s3.client()
    for i in range(3):
        client.put_object(Bucket=s3.bucket, Key=f"roundtrip/obj-{i}", Body=f"value {i}".encode())
    body = client.get_object(Bucket=s3.bucket, Key="roundtrip/obj-1")["Body"].read()
    assert body == b"value 1"
    listed = client.list_objects_v2(Bucket=s3.bucket, Prefix="roundtrip/")
    assert [o["Key"] for o in listed["Contents"]] == [f"roundtrip/obj-{i}" for i in range(3)]


def test_multipart_upload_of_50_mb_object_reads_back_identical(
    s3: S3Handle, tmp_path: Path
) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(FIFTY_MB))
    config = TransferConfig(
        multipart_threshold=8 * 1024 * 1024, multipart_chunksize=8 * 1024 * 1024
    )
    client = s3.client()
    client.upload_file(str(source), s3.bucket, "multipart/big.bin", Config=config)
    head = client.head_object(Bucket=s3.bucket, Key="multipart/big.bin")
    assert head["ContentLength"] == FIFTY_MB
    assert "-" in head["ETag"], "a multipart upload has an ETag of the form <md5>-<parts>"
    target = tmp_path / "back.bin"
    client.download_file(s3.bucket, "multipart/big.bin", str(target))
    assert (
        hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    )


def test_wrong_secret_key_is_refused(s3: S3Handle) -> None:
    intruder = boto3.client(
        "s3",
        endpoint_url=s3.endpoint_url,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key="not-the-secret",
        region_name=s3.region,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    with pytest.raises(ClientError) as refused:
        intruder.put_object(Bucket=s3.bucket, Key="intruder", Body=b"x")
    assert refused.value.response["Error"]["Code"] in {"SignatureDoesNotMatch", "AccessDenied"}


def test_storage_layer_refuses_wrong_credentials_with_a_clear_message(
    s3_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(StorageError, match=r"refused .*check the credentials Secret"):
        store_for(s3_prefix).write_bytes(f"{s3_prefix}/x", b"x")


def test_storage_layer_round_trips_through_s3(s3_prefix: str, tmp_path: Path) -> None:
    store = store_for(s3_prefix)
    store.write_bytes(f"{s3_prefix}/a/one.json", b"{}")
    local = tmp_path / "two.bin"
    local.write_bytes(b"2" * 1000)
    store.upload_file(local, f"{s3_prefix}/a/two.bin")
    assert [(o.uri.rsplit("/", 1)[1], o.size) for o in store.list(f"{s3_prefix}/a/")] == [
        ("one.json", 2),
        ("two.bin", 1000),
    ]
    assert store.exists(f"{s3_prefix}/a/two.bin")
    assert not store.exists(f"{s3_prefix}/a/three.bin")
    with pytest.raises(StorageError, match="does not exist"):
        store.read_bytes(f"{s3_prefix}/a/three.bin")
    assert store.delete_prefix(f"{s3_prefix}/a/") == 2
    assert store.list(f"{s3_prefix}/a/") == []
