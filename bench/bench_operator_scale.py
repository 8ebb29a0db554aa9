"""200 DFlashRuns created at once: time until every run has its first child, the operator's
peak resident memory (goal < 300 MB) and API requests per run, against the Job controller
turning 200 Jobs created at once into pods in the same run.

    uv run python bench/bench_operator_scale.py [--runs 200]

API requests are counted by the API server itself (API Priority and Fairness schemas that
match only the operator's ServiceAccount): exact even on a cluster shared with other work.
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

ALL_TIMEOUT = 600.0
# The operator is done when its status writes stop: no new write for this long.
QUIET_SECONDS = 5.0


def create_all(env: ol.BenchEnvironment, manifests: list[dict[str, object]]) -> None:
    """One kubectl call for all of them, like `kubectl apply -f many.yaml`."""
    ol.kubectl(
        env.admin, "create", "-n", env.namespace, "-f", "-", input=yaml.safe_dump_all(manifests)
    )


def time_to_children(env: ol.BenchEnvironment, kind: str, runs: int) -> float:
    names = [f"{kind}-{i}" for i in range(runs)]
    manifests = [ol.bench_run(n) if kind == "run" else ol.bench_job(n) for n in names]
    seen = ol.FirstSeen(env.admin, env.namespace, "jobs" if kind == "run" else "pods")
    try:
        started = time.monotonic()
        create_all(env, manifests)
        if kind == "run":
            done = seen.wait(lambda t: all(f"{n}-regen" in t for n in names), ALL_TIMEOUT)
        else:
            done = seen.wait(
                lambda t: len([k for k in t if k.startswith("job-")]) >= runs, ALL_TIMEOUT
            )
        if not done:
            raise RuntimeError(
                f"not every {kind} got a child in {ALL_TIMEOUT:.0f}s:\n{env.operator.log_tail()}"
            )
        return max(seen.times.values()) - started
    finally:
        seen.stop()


def wait_quiet(env: ol.BenchEnvironment) -> tuple[int, int]:
    last = ol.request_counts(env.admin)
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < QUIET_SECONDS:
        time.sleep(1)
        now = ol.request_counts(env.admin)
        if now[0] != last[0]:
            quiet_since = time.monotonic()
        last = now
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-scale-"))
    env = ol.start_bench_environment(workdir, f"bench-scale-{secrets.token_hex(3)}")
    try:
        baseline = time_to_children(env, "job", args.runs)
        before = wait_quiet(env)
        started = time.monotonic()
        operator = time_to_children(env, "run", args.runs)

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

        wait_for("every run Regenerating", all_regenerating, ALL_TIMEOUT)
        statused = time.monotonic() - started
        after = wait_quiet(env)
        peak = ol.peak_rss_bytes(env.operator.pid)
    finally:
        ol.stop_bench_environment(env)
    writes, total = after[0] - before[0], after[1] - before[1]
    print(f"{args.runs} objects created at once (one kubectl create)")
    print(f"  Job controller: every Job has its pod (baseline)    {baseline:6.2f} s")
    print(f"  operator: every DFlashRun has its regen Job          {operator:6.2f} s")
    print(f"  operator: every DFlashRun's status says Regenerating {statused:6.2f} s")
    print(f"ratio operator/baseline (first child): {operator / baseline:.2f}x")
    print(f"operator peak RSS: {peak / 2**20:.0f} MiB (goal < 300 MiB)")
    print(
        f"operator API requests per run: {total / args.runs:.1f} ({writes / args.runs:.1f} writes); {total} in all, {writes} writes"
    )


if __name__ == "__main__":
    main()
