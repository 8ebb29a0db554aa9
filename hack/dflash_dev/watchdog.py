"""Stops what a test session started when that session dies without cleaning up (SIGKILL,
OOM, a CI timeout): a tiny process that polls its parent and runs `down()` once it is gone.

    python -m dflash_dev.watchdog --pid <session pid> --start-ticks <ticks> cluster s3
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from . import procs

POLL_SECONDS = 1.0


def spawn(owner_pid: int, components: list[str]) -> subprocess.Popen[bytes]:
    """Start a watchdog for `owner_pid` in its own session (it must outlive the owner)."""
    ticks = procs.process_start_ticks(owner_pid) or 0
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dflash_dev.watchdog",
            "--pid",
            str(owner_pid),
            "--start-ticks",
            str(ticks),
            *components,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(os.environ),
    )


def _owner_alive(pid: int, ticks: int) -> bool:
    return procs.process_start_ticks(pid) == ticks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dflash-dev-watchdog", description=__doc__)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--start-ticks", type=int, required=True)
    parser.add_argument("components", nargs="+", choices=["cluster", "s3"])
    args = parser.parse_args(argv)
    # The owner stops us with SIGTERM after a clean teardown: then there is nothing to do.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while _owner_alive(args.pid, args.start_ticks):
        time.sleep(POLL_SECONDS)
    from . import cluster, s3server

    if "cluster" in args.components:
        cluster.down()
    if "s3" in args.components:
        s3server.down()


if __name__ == "__main__":
    main()
