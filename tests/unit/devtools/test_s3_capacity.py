"""The local S3 server's sizing arithmetic and its one-line explanation of a refused write, from
the lines SeaweedFS 4.48 really logs."""

from __future__ import annotations

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
