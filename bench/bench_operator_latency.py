"""Latency from creating a DFlashRun to its first child (the regeneration Job), p50/p95 over
50 runs, against the Job controller's latency from a Job to its first pod in the same run.

    uv run python bench/bench_operator_latency.py [--runs 50]

Needs the local control plane (make cluster-up). The operator runs as a local process with
the chart's RBAC, watching a throw-away namespace; pods select no node, so no capacity is used.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import yaml
from dflash_dev import operator_local as ol

CHILD_TIMEOUT = 60.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(env: ol.BenchEnvironment, runs: int, kind: str) -> list[float]:
    """Create one object at a time; the time until its first child is seen."""
    child_kind = "jobs" if kind == "run" else "pods"
    seen = ol.FirstSeen(env.admin, env.namespace, child_kind)
    latencies = []
    try:
        for index in range(runs):
            name = f"{kind}-{index}"
            manifest = ol.bench_run(name) if kind == "run" else ol.bench_job(name)
            started = time.monotonic()
            ol.kubectl(
                env.admin, "create", "-n", env.namespace, "-f", "-", input=yaml.safe_dump(manifest)
            )
            child = f"{name}-regen" if kind == "run" else None

            def arrived(
                times: dict[str, float], child: str | None = child, name: str = name
            ) -> bool:
                return child in times if child else any(k.startswith(f"{name}-") for k in times)

            if not seen.wait(arrived, CHILD_TIMEOUT):
                raise RuntimeError(
                    f"no child of {name} after {CHILD_TIMEOUT:.0f}s:\n{env.operator.log_tail()}"
                )
            first = (
                seen.times[child]
                if child
                else min(t for k, t in seen.times.items() if k.startswith(f"{name}-"))
            )
            latencies.append(first - started)
    finally:
        seen.stop()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-operator-latency-"))
    env = ol.start_bench_environment(workdir, f"bench-latency-{secrets.token_hex(3)}")
    try:
        baseline = measure(env, args.runs, "job")
        operator = measure(env, args.runs, "run")
    finally:
        ol.stop_bench_environment(env)
    print(
        f"kubectl create -> first child, {args.runs} objects each (kubectl start-up included in both)"
    )
    for label, values in (
        ("Job controller: Job -> Pod (baseline)", baseline),
        ("operator: DFlashRun -> regen Job", operator),
    ):
        print(
            f"  {label:42s} p50 {percentile(values, 0.5) * 1000:7.1f} ms   p95 {percentile(values, 0.95) * 1000:7.1f} ms   mean {statistics.mean(values) * 1000:7.1f} ms"
        )
    print(
        f"ratio operator/baseline: p50 {percentile(operator, 0.5) / percentile(baseline, 0.5):.2f}x   p95 {percentile(operator, 0.95) / percentile(baseline, 0.95):.2f}x"
    )


if __name__ == "__main__":
    main()
