"""The local S3 server's sizing arithmetic and its one-line explanation of a refused write, from
the lines SeaweedFS 4.48 really logs."""

from __future__ import annotations

from typing import Any

import pytest
from dflash_dev import s3capacity
from dflash_dev.s3capacity import GIB, MIB, Disk, Topology

# Lines of a real `weed mini` log (4.48) whose volume slots ran out.
NO_VOLUMES = (
    "E1204 20:20:53.591515 s3api_object_handlers_put.go:626 putToFiler: chunked upload failed: "
    "assign volume: assign volume: assign volume: rpc error: code = Unknown desc = failed to find "
    "writable volumes for collection:dflash-demo replication:000 ttl: error: No writable volumes "
    'and no free volumes left for {"collection":"dflash-demo","replication":{},"ttl":{"Count":0,'
    '"Unit":0},"version":3}'
)


def test_10_gib_free_hold_160_slots_of_64_mib() -> None:
    assert s3capacity.SLOTS_AT_BUDGET == 160
    # What the old, auto-sized server gave a large disk with 10 GiB free: 1 GiB volumes.
    assert s3capacity.slots(10 * GIB, volume_size_mb=1024) == 10


def test_buckets_take_whole_volumes() -> None:
    assert s3capacity.slots_needed({"a": 0, "b": 10 * MIB, "c": 64 * MIB + 1}) == 1 + 1 + 2


def test_the_refusal_is_found_in_the_log_and_described_in_one_line() -> None:
    cause = s3capacity.find_refusal("I1204 started\n" + NO_VOLUMES + "\n")
    assert cause == "no writable volumes left for bucket dflash-demo"
    line = s3capacity.describe_refusal(
        cause, Disk(free=int(0.5 * GIB), total=200 * GIB), Topology(159, 0), "/data", "/s3.log"
    )
    assert "\n" not in line
    assert line.startswith("the S3 server (SeaweedFS) refused the write: no writable volumes left")
    assert "(0 of 159 volume slots of 64 MiB free; 0.5 GiB free on /data)" in line
    assert line.endswith("then `make s3-down` and run again; log: /s3.log")


def test_the_newest_cause_wins() -> None:
    log = "no space left on device\n" + NO_VOLUMES
    assert s3capacity.find_refusal(log) == "no writable volumes left for bucket dflash-demo"
    assert s3capacity.find_refusal("I1204 all is well") is None


@pytest.mark.parametrize(
    ("disk", "expected"),
    [
        (Disk(free=200 * GIB, total=1000 * GIB), None),
        (Disk(free=10 * GIB, total=200 * GIB), None),
        (Disk(free=512 * MIB, total=200 * GIB), "has 0.5 GiB free, less than the 1.0 GiB"),
        (
            Disk(free=12 * GIB, total=2000 * GIB),
            "but SeaweedFS stops writing below 1% free (20.0 GiB)",
        ),
        (Disk(free=25 * GIB, total=2000 * GIB), None),
    ],
)
def test_a_disk_too_small_or_too_full_is_refused_before_the_start(
    disk: Disk, expected: str | None
) -> None:
    problem = s3capacity.check_disk(disk, "/state/s3")
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem
        assert "DFLASH_STATE_DIR" in problem


def _client_error(code: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "PutObject")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "status", "blamed"),
    [
        ("InternalError", 500, True),  # what SeaweedFS answers a write it has no volume for
        ("ServiceUnavailable", 503, True),
        ("SignatureDoesNotMatch", 403, False),  # a wrong key
        ("InvalidAccessKeyId", 403, False),
        ("NoSuchBucket", 404, False),
    ],
)
def test_only_a_server_side_failure_is_explained_by_the_servers_refusal(
    code: str, status: int, blamed: bool
) -> None:
    from boto3.exceptions import S3UploadFailedError
    from dflash_dev import s3server
    from dflash_trainer.storage import s3_error

    error = _client_error(code, status)
    assert s3server.is_server_failure(error) is blamed
    try:  # boto3's upload wraps the answer, as the demo's uploads see it
        raise S3UploadFailedError(f"Failed to upload x to b/k: {error}") from error
    except S3UploadFailedError as wrapped:
        assert s3server.is_server_failure(wrapped) is blamed
    # ...and a failed stage says it in its one line, which the demo reads from the run.
    line = str(s3_error("s3://b/k", "writing", error, "http://127.0.0.1:9000"))
    assert s3server.is_server_failure_text(line) is blamed, line
    assert s3server.is_server_failure(ConnectionError("refused")) is False


def test_the_private_server_starts_sized_and_disk_checked_like_the_main_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dflash_dev import s3server
    from dflash_dev.demo.private_s3 import PrivateS3
    from dflash_dev.errors import DevError

    private = PrivateS3(tmp_path / "s3")
    argv = private.build_argv()
    assert f"-master.volumeSizeLimitMB={s3capacity.VOLUME_SIZE_MB}" in argv
    assert argv == s3server.build_mini_argv(tmp_path / "s3" / "data", private.ports, "dflash")
    env = s3server.build_mini_env("a", "b")
    assert env["WEED_MASTER_VOLUME_GROWTH_COPY_1"] == str(s3capacity.GROWTH_PER_COLLECTION)

    # A disk with 0.5 GiB free: refused before any process starts, naming the folder.
    monkeypatch.setattr(
        s3server.shutil, "disk_usage", lambda _p: shutil_usage(int(0.5 * GIB), 100 * GIB)
    )
    with pytest.raises(DevError, match=r"the S3 data folder .*s3/data has 0\.5 GiB free"):
        private.start()
    assert not (tmp_path / "s3" / "logs").exists()  # no process was started


def shutil_usage(free: int, total: int) -> Any:
    import shutil

    return shutil._ntuple_diskusage(total, total - free, free)  # type: ignore[attr-defined]
