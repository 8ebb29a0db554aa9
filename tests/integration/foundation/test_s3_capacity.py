"""The local S3 server is sized for small disks, checked against SeaweedFS's own accounting
(its master's /dir/status): one slot per 64 MiB of free disk whatever the disk's size, one
slot per bucket, given back when the bucket goes; and a server whose slots are all taken
refuses a write with one line that names the cause, the slots, the free disk and its log."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from dflash_dev import s3capacity, s3server
from dflash_dev.demo import assets
from dflash_dev.demo.private_s3 import PrivateS3
from dflash_dev.pytest_plugin import FULL_S3_NAME

# Settles within two heartbeats of the volume server.
SETTLE_SECONDS = 15.0


def settled(info: s3server.S3Info, want: int) -> s3capacity.Topology:
    """The topology once its free slots reach `want` (or whatever it says after the wait)."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        topology = s3server.topology(info)
        assert topology is not None
        if topology.free_slots == want or time.monotonic() > deadline:
            return topology
        time.sleep(0.3)


@pytest.fixture
def sizing() -> Iterator[s3server.S3Info]:
    info = s3server.up(name="s3-sizing")
    yield info
    s3server.down("s3-sizing")


def test_slots_are_64_mib_of_free_disk_and_each_bucket_takes_one_and_gives_it_back(
    sizing: s3server.S3Info,
) -> None:
    topology = s3server.topology(sizing)
    assert topology is not None
    free = shutil.disk_usage(sizing.data_dir).free
    # SeaweedFS's own count, from the free disk and the 64 MiB limit we set (other processes
    # write to a shared disk meanwhile: within 5%). The old auto-sizing gave a disk of 100 GiB
    # or more 1 GiB volumes: 16 times fewer slots.
    expected = s3capacity.slots(free)
    assert 0.95 * expected - 2 <= topology.max_slots <= 1.05 * expected + 2, (topology, free)
    assert topology.free_slots == topology.max_slots  # nothing stored yet

    client = sizing.client()
    buckets = [f"slot-{i}" for i in range(4)]
    for bucket in buckets:
        client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key="one", Body=b"x" * 1000)
    after = settled(sizing, topology.free_slots - len(buckets))
    assert topology.free_slots - after.free_slots == len(buckets)  # one volume per bucket

    client.delete_bucket(Bucket=buckets[0])  # non-empty: SeaweedFS drops the collection
    assert settled(sizing, after.free_slots + 1).free_slots == after.free_slots + 1


def test_the_demos_and_the_suite_fit_in_10_gib_of_free_disk() -> None:
    """The arithmetic of docs/development.md: 160 slots at 10 GiB free; the demo uses one
    bucket (its target, sources and every stage's output fit in a few volumes) and the suite
    at most the peak its session reports (pytest_plugin checks it against 160 each run)."""
    assert s3capacity.SLOTS_AT_BUDGET == 160
    demo = s3capacity.slots_needed({"dflash": 0, "dflash-demo": 150 * s3capacity.MIB})
    assert demo <= 4 < s3capacity.SLOTS_AT_BUDGET


def test_a_full_server_refuses_the_demos_upload_with_one_line_naming_the_cause(
    full_s3: s3server.S3Info,
) -> None:
    files = assets.build_prompt_sources(2)
    with pytest.raises(assets.UploadError) as refused:
        assets.upload_sources(full_s3.client(), files, full_s3.bucket)

    line = s3server.explain_failure(full_s3, refused.value.what, refused.value.cause, FULL_S3_NAME)
    assert "\n" not in line
    assert line.startswith(f"uploading s3://{full_s3.bucket}/data/chat.jsonl failed: the S3 server")
    assert f"no writable volumes left for bucket {full_s3.bucket}" in line
    assert "(0 of 1 volume slots of 64 MiB free;" in line and f"free on {full_s3.data_dir})" in line
    assert "Free disk space there or delete buckets" in line
    assert line.endswith(f"log: {full_s3.log}")


def test_a_stopped_server_is_named_as_not_running(full_s3: s3server.S3Info) -> None:
    s3server.down(FULL_S3_NAME)
    with pytest.raises(assets.UploadError) as refused:
        assets.upload_sources(full_s3.client(), assets.build_prompt_sources(2), full_s3.bucket)
    line = s3server.explain_failure(full_s3, refused.value.what, refused.value.cause, FULL_S3_NAME)
    assert f"the S3 server at {full_s3.endpoint_url} is not running" in line
    assert "`make s3-down s3-up`" in line and "\n" not in line


def test_a_wrong_key_after_a_refused_write_is_named_as_what_the_server_answered(
    full_s3: s3server.S3Info,
) -> None:
    """The log keeps its "No writable volumes" line after a refusal: a later failure that is
    not a refused write (here a wrong secret key) is not blamed on it."""
    with pytest.raises(assets.UploadError):
        assets.upload_sources(full_s3.client(), assets.build_prompt_sources(2), full_s3.bucket)
    assert s3server.refusal(full_s3, FULL_S3_NAME) is not None  # the line is in the log

    wrong = replace(full_s3, secret_key=full_s3.secret_key + "x")
    with pytest.raises(assets.UploadError) as failed:
        assets.upload_sources(wrong.client(), assets.build_prompt_sources(2), full_s3.bucket)
    line = s3server.explain_failure(wrong, failed.value.what, failed.value.cause, FULL_S3_NAME)
    assert "no writable volumes" not in line and "refused the write" not in line, line
    assert f"the S3 server at {full_s3.endpoint_url} answered:" in line
    assert "SignatureDoesNotMatch" in line or "InvalidAccessKeyId" in line or "403" in line, line


def test_the_private_server_of_the_resilience_tests_is_sized_and_checked_like_the_main_one(
    tmp_path: Path,
) -> None:
    """demo/private_s3.py starts `weed mini` the way s3server.up does: 64 MiB volumes (its
    master's own slot count is the free disk divided by 64 MiB)."""
    private = PrivateS3(tmp_path / "s3").start()
    try:
        topology = s3server.topology(private.info)
        assert topology is not None
        expected = s3capacity.slots(shutil.disk_usage(private.info.data_dir).free)
        assert 0.95 * expected - 2 <= topology.max_slots <= 1.05 * expected + 2, topology
    finally:
        private.stop()
