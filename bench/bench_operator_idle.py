"""Steady state: with runs that have nothing to do, the operator should write nothing (goal:
0 write requests per minute). Baseline: its write rate while the same runs were starting.

    uv run python bench/bench_operator_idle.py [--runs 20] [--seconds 60] [--resync 5]

The resync interval is shortened (default 60 s in production) so that every run is
reconciled a dozen times in the measured minute: each pass reads, none may write.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import time
from pathlib import Path

import yaml
from dflash_dev import operator_local as ol
from dflash_dev.kube_wait import wait_for

START_TIMEOUT = 300.0
# After the runs settle, wait this long before measuring (events of the last writes).
SETTLE_SECONDS = 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--resync", type=float, default=5.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-idle-"))
    env = ol.start_bench_environment(
        workdir, f"bench-idle-{secrets.token_hex(3)}", resync_seconds=args.resync
    )
    try:
        start_counts = ol.request_counts(env.admin)
        started = time.monotonic()
        manifests = [ol.bench_run(f"run-{i}") for i in range(args.runs)]
        ol.kubectl(
            env.admin, "create", "-n", env.namespace, "-f", "-", input=yaml.safe_dump_all(manifests)
        )

        def all_regenerating() -> bool:
            out = ol.kubectl(
                env.admin,
                "get",
                "dflashruns",
                "-n",
                env.namespace,
                "-o",
                "jsonpath={.items[*].status.phase}",
            )
            return out.split().count("Regenerating") == args.runs

        wait_for("every run Regenerating", all_regenerating, START_TIMEOUT)
        busy_counts = ol.request_counts(env.admin)
        busy_minutes = (time.monotonic() - started) / 60
        time.sleep(SETTLE_SECONDS)
        before = ol.request_counts(env.admin)
        time.sleep(args.seconds)
        after = ol.request_counts(env.admin)
    finally:
        ol.stop_bench_environment(env)
    minutes = args.seconds / 60
    idle_writes = (after[0] - before[0]) / minutes
    idle_reads = (after[1] - after[0] - before[1] + before[0]) / minutes
    busy_writes = (busy_counts[0] - start_counts[0]) / busy_minutes
    print(
        f"{args.runs} runs waiting on unschedulable pods, resync every {args.resync:.0f} s, measured {args.seconds:.0f} s"
    )
    print(f"  starting (baseline): {busy_writes:8.1f} write requests/min")
    print(
        f"  steady state:        {idle_writes:8.1f} write requests/min (goal 0), {idle_reads:.1f} reads/min"
    )
    print(f"ratio steady/starting writes: {idle_writes / busy_writes:.3f}")


if __name__ == "__main__":
    main()
