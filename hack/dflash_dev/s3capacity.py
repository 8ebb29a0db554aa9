"""How the local S3 server (SeaweedFS `weed mini`) is sized for small disks, and why it
refused a write, in one line.

SeaweedFS keeps objects in volumes; every bucket is its own collection and takes whole
volumes. `weed mini` gives its volume server one slot per volume-size-limit of free disk
(weed/storage/store.go `MaybeAdjustVolumeMax`: the volumes it has plus the unclaimed free
bytes divided by the limit, recomputed at every heartbeat), and by default sizes a volume at
1% of the disk's *total* capacity, 64 to 1024 MiB (weed/command/mini.go
`calculateOptimalVolumeSizeMB`). On a large disk with 15 GiB free that is 15 slots of 1 GiB:
two or three buckets of the demo and the suite's per-test buckets exhaust it. Here a volume is
64 MiB (mini's own floor) and a collection grows one volume at a time, so 10 GiB free hold
160 slots, one per bucket plus one per further 64 MiB stored (tests/integration/foundation/
test_s3_capacity.py checks this against the real server).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1024 * 1024
GIB = 1024 * MIB
VOLUME_SIZE_MB = 64
# master.volume_growth.copy_1: volumes a collection grows at once (mini's default since 4.33,
# set explicitly so that a change of default cannot bring back the exhaustion).
GROWTH_PER_COLLECTION = 1
# `weed mini` hard-codes -minFreeSpace=1 (%): below it the volume server turns every volume
# read-only and takes no new one.
MIN_FREE_PERCENT = 1.0
# The disk the demo, the broken-data demo and the whole suite must run on.
BUDGET_FREE_BYTES = 10 * GIB
# Below this much free disk the server is not started: the demo alone needs a few slots.
MIN_START_FREE_BYTES = 1 * GIB


def slots(free_bytes: int, volume_size_mb: int = VOLUME_SIZE_MB) -> int:
    """Volume slots SeaweedFS gives `free_bytes` of unclaimed disk (MaybeAdjustVolumeMax)."""
    return max(free_bytes, 0) // (volume_size_mb * MIB)


SLOTS_AT_BUDGET = slots(BUDGET_FREE_BYTES)


def slots_needed(bucket_bytes: dict[str, int], volume_size_mb: int = VOLUME_SIZE_MB) -> int:
    """Slots `bucket_bytes` (bytes stored per bucket) take: whole volumes per bucket."""
    size = volume_size_mb * MIB
    return sum(max(1, -(-stored // size)) for stored in bucket_bytes.values())


@dataclass(frozen=True)
class Disk:
    """The data folder's file system, in bytes."""

    free: int
    total: int

    @property
    def percent_free(self) -> float:
        return 100.0 * self.free / self.total if self.total else 0.0


def format_gib(size: int) -> str:
    return f"{size / GIB:.1f} GiB"


def check_disk(disk: Disk, data_dir: str) -> str | None:
    """Why the server would refuse writes on this disk from the start (None: it fits). It
    needs 1 GiB it may write, above the 1% of the disk SeaweedFS keeps free."""
    advice = (
        "free disk space there, or set DFLASH_STATE_DIR to a folder on a disk with more room "
        f"(the demo and the tests fit in {format_gib(BUDGET_FREE_BYTES)})"
    )
    if disk.free < MIN_START_FREE_BYTES:
        return (
            f"the S3 data folder {data_dir} has {format_gib(disk.free)} free, less than the "
            f"{format_gib(MIN_START_FREE_BYTES)} the local S3 server needs: {advice}"
        )
    kept = int(disk.total * MIN_FREE_PERCENT / 100)
    if disk.free - kept < MIN_START_FREE_BYTES:
        return (
            f"the S3 data folder {data_dir} has {format_gib(disk.free)} free of "
            f"{format_gib(disk.total)}, but SeaweedFS stops writing below "
            f"{MIN_FREE_PERCENT:g}% free ({format_gib(kept)}), which leaves less than the "
            f"{format_gib(MIN_START_FREE_BYTES)} the local S3 server needs: {advice}"
        )
    return None


@dataclass(frozen=True)
class Topology:
    """The master's view of its volume slots (GET /dir/status)."""

    max_slots: int
    free_slots: int


_NO_VOLUMES = re.compile(
    r'No writable volumes and no free volumes left for \{"collection":"([^"]*)"'
)
_DISK_LOW = re.compile(r"disk free ([0-9.]+)% < required ([0-9.]+)%")
_NO_SPACE = re.compile(r"no space left on device", re.IGNORECASE)


def find_refusal(log_text: str) -> str | None:
    """The cause a SeaweedFS log gives for refusing writes, newest first; None if it gives none."""
    found: list[tuple[int, str]] = []
    for match in _NO_VOLUMES.finditer(log_text):
        found.append((match.start(), f"no writable volumes left for bucket {match.group(1)}"))
    for match in _DISK_LOW.finditer(log_text):
        found.append((match.start(), f"disk free {match.group(1)}% is below its {match.group(2)}%"))
    for match in _NO_SPACE.finditer(log_text):
        found.append((match.start(), "no space left on the data folder's disk"))
    return max(found)[1] if found else None


def describe_refusal(
    cause: str, disk: Disk | None, topology: Topology | None, data_dir: str, log: str
) -> str:
    """One line: the cause, the slots and disk behind it, what to do, and the log."""
    facts = []
    if topology is not None:
        facts.append(
            f"{topology.free_slots} of {topology.max_slots} volume slots of {VOLUME_SIZE_MB} "
            "MiB free"
        )
    if disk is not None:
        facts.append(f"{format_gib(disk.free)} free on {data_dir}")
    said = f" ({'; '.join(facts)})" if facts else ""
    return (
        f"the S3 server (SeaweedFS) refused the write: {cause}{said}. Free disk space there or "
        f"delete buckets you no longer need, then `make s3-down` and run again; log: {log}"
    )
