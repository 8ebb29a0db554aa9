"""The operator with Kueue in the loop, on the local control plane's real Kueue.

1. API requests per run at rest: N runs whose regeneration Job waits in a held Kueue queue
   (ClusterQueue stopPolicy Hold), against the baseline of N runs whose Job waits on
   unschedulable pods without a queue, each measured for the same time with the same resync.
2. Time from quota becoming available to running pods: a queued Job whose ClusterQueue is
   released (Kueue admits it and unsuspends it; the scheduler and kwok start the pod), against
   the baseline of a plain suspended Job resumed by hand. Medians of --repeats each.

    uv run python bench/bench_operator_kueue.py [--runs 10] [--seconds 60] [--resync 5]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from dflash_dev import operator_local as ol
from dflash_dev.kube_wait import wait_for

START_TIMEOUT = 300.0
SETTLE_SECONDS = 10.0
HELD_QUEUE = "bench-held"


def queue_objects(name: str, namespace: str, held: bool) -> list[dict[str, Any]]:
    """A ClusterQueue (held or not) with CPU, memory and disk quota on a flavor without node
    labels, and its LocalQueue."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "bench-any"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": name},
         "spec": {
             "namespaceSelector": {},
             "stopPolicy": "Hold" if held else "None",
             # Every resource a stage pod requests must be covered (Kueue: "unavailable").
             "resourceGroups": [{
                 "coveredResources": ["cpu", "memory", "ephemeral-storage"],
                 "flavors": [{"name": "bench-any", "resources": [
                     {"name": "cpu", "nominalQuota": 1000},
                     {"name": "memory", "nominalQuota": "64Ti"},
                     {"name": "ephemeral-storage", "nominalQuota": "64Ti"}]}]}],
         }},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": name}},
    ]  # fmt: skip


def phases(env: Any) -> list[str]:
    out = ol.kubectl(
        env.admin, "get", "dflashruns", "-n", env.namespace,
        "-o", "jsonpath={range .items[*]}{.status.phase}|{.status.progress}{'\\n'}{end}",
    )  # fmt: skip
    return [line for line in out.splitlines() if line]


def at_rest(args: argparse.Namespace, queued: bool) -> tuple[float, float]:
    """(requests/min/run, writes/min/run) of the operator once N runs wait."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-kueue-"))
    namespace = f"bench-kueue-{'q' if queued else 'b'}-{secrets.token_hex(3)}"
    env = ol.start_bench_environment(workdir, namespace, resync_seconds=args.resync)
    try:
        runs = [ol.bench_run(f"run-{i}") for i in range(args.runs)]
        if queued:
            objects = queue_objects(HELD_QUEUE, namespace, held=True)
            ol.kubectl(env.admin, "apply", "-f", "-", input=yaml.safe_dump_all(objects))
            for run in runs:
                run["spec"]["queueName"] = HELD_QUEUE
        ol.kubectl(env.admin, "create", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(runs))
        waiting = "Regenerating|regen queued" if queued else "Regenerating|regen 0/1"
        wait_for(
            f"every run waiting ({waiting})",
            lambda: phases(env).count(waiting) == args.runs,
            START_TIMEOUT,
        )
        time.sleep(SETTLE_SECONDS)
        before = ol.request_counts(env.admin)
        time.sleep(args.seconds)
        after = ol.request_counts(env.admin)
    finally:
        ol.stop_bench_environment(env)
        if queued:
            ol.kubectl(env.admin, "delete", "clusterqueue", HELD_QUEUE, "--wait=false")
    per_run_minute = args.runs * args.seconds / 60
    writes = (after[0] - before[0]) / per_run_minute
    requests = (after[1] - before[1]) / per_run_minute
    return requests, writes


def plain_job(name: str, queue: str | None) -> dict[str, Any]:
    labels = {"kwok.dflash.dev/hold": "true"}
    meta: dict[str, Any] = {"name": name}
    if queue:
        meta["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {"suspend": True, "template": {
            "metadata": {"labels": labels},
            "spec": {"restartPolicy": "Never",
                     "nodeSelector": {"dflash.dev/node-pool": "cpu"},
                     "containers": [{"name": "c", "image": "bench",
                                     "resources": {"requests": {"cpu": "1"}}}]}}},
    }  # fmt: skip


def running(admin: Path, namespace: str, job: str) -> bool:
    out = ol.kubectl(
        admin, "get", "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}",
        "-o", "jsonpath={.items[*].status.phase}",
    )  # fmt: skip
    return "Running" in out.split()


def to_running(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Seconds from 'may start' to a Running pod: resumed by hand (baseline) and released by
    Kueue (the ClusterQueue's hold lifted)."""
    admin = ol.kubeconfig_path()
    namespace = f"bench-kueue-admit-{secrets.token_hex(3)}"
    ol.kubectl(admin, "create", "namespace", namespace)
    baseline, kueue = [], []
    try:
        for i in range(args.repeats):
            name = f"plain-{i}"
            ol.kubectl(admin, "create", "-n", namespace, "-f", "-",
                       input=json.dumps(plain_job(name, None)))  # fmt: skip
            started = time.monotonic()
            ol.kubectl(admin, "patch", "job", name, "-n", namespace, "--type=merge",
                       "-p", '{"spec":{"suspend":false}}')  # fmt: skip
            wait_for(f"{name} running", lambda n=name: running(admin, namespace, n), 60)
            baseline.append(time.monotonic() - started)

            queue = f"bench-admit-{i}"
            objects = queue_objects(queue, namespace, held=True)
            ol.kubectl(admin, "apply", "-f", "-", input=yaml.safe_dump_all(objects))
            name = f"queued-{i}"
            ol.kubectl(admin, "create", "-n", namespace, "-f", "-",
                       input=json.dumps(plain_job(name, queue)))  # fmt: skip
            time.sleep(2)  # Kueue has made its Workload, held
            started = time.monotonic()
            ol.kubectl(admin, "patch", "clusterqueue", queue, "--type=merge",
                       "-p", '{"spec":{"stopPolicy":"None"}}')  # fmt: skip
            wait_for(f"{name} running", lambda n=name: running(admin, namespace, n), 60)
            kueue.append(time.monotonic() - started)
            ol.kubectl(admin, "delete", "jobs", "--all", "-n", namespace, "--wait=false")
            ol.kubectl(admin, "delete", "clusterqueue", queue, "--wait=false")
    finally:
        ol.kubectl(admin, "delete", "namespace", namespace, "--wait=false")
    return baseline, kueue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--resync", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    base_requests, base_writes = at_rest(args, queued=False)
    queued_requests, queued_writes = at_rest(args, queued=True)
    print(f"{args.runs} runs at rest, resync every {args.resync:.0f} s, {args.seconds:.0f} s each")
    print(f"  baseline (pods unschedulable, no queue): {base_requests:6.1f} requests/min/run, "
          f"{base_writes:.2f} writes/min/run")  # fmt: skip
    print(f"  queued in a held Kueue ClusterQueue:    {queued_requests:6.1f} requests/min/run, "
          f"{queued_writes:.2f} writes/min/run")  # fmt: skip
    print(f"RATIO requests at rest, queued vs baseline: {queued_requests / base_requests:.2f}")

    baseline, kueue = to_running(args)
    base, queued = statistics.median(baseline), statistics.median(kueue)
    print(f"to a Running pod, median of {args.repeats}: plain Job resumed by hand {base:.2f} s "
          f"(range {min(baseline):.2f}-{max(baseline):.2f}); queued Job released by Kueue "
          f"{queued:.2f} s (range {min(kueue):.2f}-{max(kueue):.2f})")  # fmt: skip
    print(f"RATIO admission-to-running, Kueue vs plain resume: {queued / base:.2f}")


if __name__ == "__main__":
    main()
