"""Warm `cluster-up` time and memory, against the bare apiserver start measured in the same run.

    uv run python bench/bench_cluster_up.py [--rounds 3]

Each round stops the cluster, then times a full `up()` (binaries cached) while sampling the
resident memory of every component. The baseline is the time until the apiserver alone
answers /readyz within the same `up()`, so the ratio shows what the rest of the stack costs.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from dflash_dev import cluster, procs

SAMPLE_SECONDS = 0.1


def rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def total_rss(state: Path) -> int:
    total = 0
    for name in cluster.COMPONENTS:
        tracked = procs.read_tracked(state, name)
        if tracked and tracked.is_alive():
            total += rss_bytes(tracked.pid)
    return total


def one_round() -> tuple[float, float, int, int]:
    cluster.down()
    state = cluster.state_dir()
    peak = 0
    apiserver_ready: list[float] = []
    done = threading.Event()
    start = time.monotonic()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, total_rss(state))
            if not apiserver_ready and (state / "pids" / "kube-controller-manager.json").exists():
                # the controller-manager is started right after the apiserver answered /readyz
                apiserver_ready.append(time.monotonic() - start)
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cluster.up()
    total = time.monotonic() - start
    time.sleep(2)  # settled memory, after the start-up burst
    settled = total_rss(state)
    done.set()
    sampler.join()
    return total, apiserver_ready[0] if apiserver_ready else float("nan"), peak, settled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = [one_round() for _ in range(args.rounds)]
    totals = [r[0] for r in rounds]
    bases = [r[1] for r in rounds]
    peak = max(r[2] for r in rounds)
    settled = max(r[3] for r in rounds)
    print(
        f"warm cluster-up: median {statistics.median(totals):.1f}s "
        f"(rounds: {', '.join(f'{t:.1f}' for t in totals)})"
    )
    print(f"baseline (etcd + apiserver ready): median {statistics.median(bases):.1f}s")
    print(
        f"ratio full stack / bare apiserver: {statistics.median(totals) / statistics.median(bases):.2f}x"
    )
    print(
        f"peak RSS of all components during up: {peak / 2**20:.0f} MiB; settled: {settled / 2**20:.0f} MiB"
    )


if __name__ == "__main__":
    main()
