"""The training stage on both backends, in one run on the local control plane: a PyTorchJob
(training-operator v1.9) against a TrainJob (Kubeflow Trainer v2.3.0 on JobSet v0.12.0), each
admitted by the real Kueue 0.19.2 as one gang on the fake RTX PRO 6000 nodes.

1. Apply to Running: seconds from `kubectl apply` of a run of imported completions to every
   training pod Running, and from the training child's appearance to that point (the backend's
   own path: its controller, Kueue's admission, the scheduler, kwok). The data stages' pods are
   ended at once by this script with a passing result, as the operator tests play the kubelet,
   so what differs between the backends is the training stage alone.
2. Requests per minute of a queued run: the training child waits in a held ClusterQueue
   (stopPolicy Hold); the operator's API requests over --seconds (API priority and fairness
   counters, as bench_operator_kueue.py).

The backends alternate within each repeat (PyTorchJob first on even repeats), and the TrainJob
figures are printed as ratios against the PyTorchJob ones measured in the same run.

    .venv/bin/python bench/bench_training_backends.py [--repeats 3] [--seconds 60] [--resync 5]

Needs the local cluster with both backends (make cluster-up after `hack/build-binaries.sh
trainer training-operator`).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from dflash_dev import operator_local as ol
from dflash_dev.kube_wait import wait_for
from dflash_dev.kueue_queues import build_gpu_queue

BACKENDS = ("pytorchjob", "trainjob")
KINDS = {"pytorchjob": "pytorchjobs.kubeflow.org", "trainjob": "trainjobs.trainer.kubeflow.org"}
# The label naming the training child on its pods: a PyTorchJob's, or the JobSet's (the
# TrainJob's namesake).
CHILD_LABELS = ("training.kubeflow.org/job-name", "jobset.sigs.k8s.io/jobset-name")
HOLD = {"kwok.dflash.dev/hold": "true"}  # kwok keeps these pods Running; this script ends them
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
RTX_PRODUCT = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
NODES, GPUS_PER_NODE = 2, 2  # one fake node's 4 GPUs: a gang Kueue admits whole or not at all
# The data stages of a run of imported completions, in order, with a passing result each.
DATA_STAGES: dict[str, tuple[str, dict[str, Any]]] = {
    "score": ("Scoring", {"stage": "score", "ok": True, "samples": 100, "scored": 64,
                          "scoresUri": "s3://artifacts/likelihood/sample/"}),
    "audit-completions": ("AuditingCompletions", {"stage": "audit", "ok": True, "verdict": "pass"}),
    "tokenize": ("Tokenizing", {"stage": "tokenize", "ok": True, "samples": 200, "tokens": 90000}),
    "audit-tokens": ("AuditingTokens", {"stage": "audit", "ok": True, "verdict": "pass"}),
}  # fmt: skip
TIMEOUT = 300.0
POLL_SECONDS = 0.2
SETTLE_SECONDS = 10.0


@dataclass
class World:
    """One namespace with a GPU queue (held or not) and an operator watching it."""

    admin: Path
    namespace: str
    cluster_queue: str
    flavor: str
    operator: ol.OperatorProcess

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return ol.kubectl(self.admin, *args, "-n", self.namespace, input=input)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))


def held_pools() -> dict[str, Any]:
    """The chart's pools, each holding its pods; the training pool's pods name the queue."""
    pools = ol.chart_pools()
    for pool in pools["nodePools"].values():
        pool["labels"] = {**(pool.get("labels") or {}), **HOLD}
    pools["nodePools"]["rtx-pro-6000"]["labels"][QUEUE_LABEL] = "gpus"
    return pools


def start_world(workdir: Path, held: bool, resync: float) -> World:
    admin = ol.kubeconfig_path()
    kubeconfig, _ = ol.prepare(admin, workdir)
    ol.install_request_counters(admin)
    suffix = secrets.token_hex(3)
    namespace, cluster_queue, flavor = (
        f"bench-backends-{suffix}",
        f"bench-{suffix}",
        f"rtx-{suffix}",
    )
    ol.kubectl(admin, "create", "namespace", namespace)
    objects = build_gpu_queue(
        namespace, cluster_queue, flavor, RTX_PRODUCT, NODES * GPUS_PER_NODE, held=held
    )
    ol.kubectl(admin, "apply", "-f", "-", input=yaml.safe_dump_all(objects))
    ol.kubectl(admin, "create", "secret", "generic", "s3-creds", "-n", namespace,
               "--from-literal=AWS_ACCESS_KEY_ID=bench", "--from-literal=AWS_SECRET_ACCESS_KEY=bench")  # fmt: skip
    pools_file = workdir / "pools.yaml"
    pools_file.write_text(yaml.safe_dump(held_pools()))
    operator = ol.OperatorProcess(
        kubeconfig=kubeconfig,
        pools_file=pools_file,
        log_path=workdir / "operator.log",
        namespaces=(namespace,),
        env=ol.local_settings(),
        resync_seconds=resync,
    ).start()
    operator.wait_ready()
    return World(admin, namespace, cluster_queue, flavor, operator)


def stop_world(world: World) -> None:
    world.operator.stop()
    ol.kubectl(world.admin, "delete", "namespace", world.namespace, "--wait=false")
    ol.kubectl(world.admin, "delete", "clusterqueue", world.cluster_queue, "--wait=false")
    ol.kubectl(world.admin, "delete", "resourceflavor", world.flavor, "--wait=false")


def run_manifest(name: str, backend: str) -> dict[str, Any]:
    """A run of completions regenerated elsewhere: its first stage scores them."""
    return {
        "apiVersion": "dflash.dev/v1alpha1", "kind": "DFlashRun", "metadata": {"name": name},
        "spec": {
            "target": {"model": "s3://models/qwen3-8b"},
            "data": {"sources": [
                {"name": "done", "uri": "s3://datasets/regen/", "format": "regenerated"}]},
            "regeneration": {"enabled": False, "nodePool": "cpu"},
            "training": {"nodes": NODES, "gpusPerNode": GPUS_PER_NODE, "maxRestarts": 1,
                         "launcher": backend},
            "evaluation": {"enabled": False},
            "storage": {"bucket": "artifacts", "credentialsSecretRef": {"name": "s3-creds"}},
        },
    }  # fmt: skip


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def end_pod(world: World, pod: dict[str, Any], result: dict[str, Any]) -> None:
    """The pod's end as a kubelet writes it: terminated state and termination message."""
    container = pod["spec"]["containers"][0]
    state = {
        "terminated": {
            "exitCode": 0,
            "reason": "Completed",
            "startedAt": now(),
            "finishedAt": now(),
            "message": json.dumps(result),
        }
    }
    status = {"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
        "started": False, "restartCount": 0, "state": state}]}}  # fmt: skip
    world.kubectl("patch", "pod", pod["metadata"]["name"], "--subresource=status",
                  "--type=merge", "-p", json.dumps(status))  # fmt: skip


def running(pods: list[dict[str, Any]], label: str, child: str) -> list[dict[str, Any]]:
    return [
        p for p in pods
        if p["metadata"].get("labels", {}).get(label) == child
        and p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]  # fmt: skip


def training_pods(pods: list[dict[str, Any]], child: str) -> list[dict[str, Any]]:
    return [p for label in CHILD_LABELS for p in running(pods, label, child)]


def drive_data_stages(world: World, run: str, pods: list[dict[str, Any]]) -> None:
    """End the Running pods of the data stage the run is in."""
    phase = world.get("dflashrun", run).get("status", {}).get("phase")
    for stage, (stage_phase, result) in DATA_STAGES.items():
        if phase == stage_phase:
            for pod in running(pods, "batch.kubernetes.io/job-name", f"{run}-{stage}"):
                end_pod(world, pod, result)


def child_exists(world: World, backend: str, child: str) -> bool:
    found = world.kubectl("get", KINDS[backend], child, "--ignore-not-found", "-o", "name")
    return bool(found.strip())


def to_running(world: World, backend: str, name: str) -> tuple[float, float]:
    """(apply -> every training pod Running, child appeared -> every training pod Running)."""
    child = f"{name}-train"
    started = time.monotonic()
    world.kubectl("apply", "-f", "-", input=yaml.safe_dump(run_manifest(name, backend)))
    appeared: float | None = None
    while time.monotonic() - started < TIMEOUT:
        pods = world.get("pods")["items"]
        if appeared is None:
            drive_data_stages(world, name, pods)
            if child_exists(world, backend, child):
                appeared = time.monotonic()
        elif len(training_pods(pods, child)) >= NODES:
            done = time.monotonic()
            return done - started, done - appeared
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"{backend}: {name}'s training pods not Running after {TIMEOUT:.0f}s")


def delete_run(world: World, name: str) -> None:
    world.kubectl("delete", "dflashrun", name, "--wait=true", "--timeout=120s")
    wait_for(
        f"{name}'s pods gone",
        lambda: not [p for p in world.get("pods")["items"]
                     if p["metadata"]["name"].startswith(f"{name}-")],
        TIMEOUT,
    )  # fmt: skip


def measure_to_running(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    figures: dict[str, list[tuple[float, float]]] = {b: [] for b in BACKENDS}
    world = start_world(Path(tempfile.mkdtemp(prefix="bench-backends-")), False, args.resync)
    try:
        for repeat in range(args.repeats):
            order = BACKENDS if repeat % 2 == 0 else tuple(reversed(BACKENDS))
            for backend in order:
                name = f"{backend[:5]}-{repeat}"
                figures[backend].append(to_running(world, backend, name))
                delete_run(world, name)
    finally:
        stop_world(world)
    return figures


def suspended(world: World, backend: str, child: str) -> bool:
    spec = world.get(KINDS[backend], child)["spec"]
    if backend == "trainjob":
        return bool(spec.get("suspend"))
    return bool(spec.get("runPolicy", {}).get("suspend"))


def queued_requests(args: argparse.Namespace, backend: str) -> float:
    """Operator requests per minute while one run's training waits in a held queue."""
    world = start_world(Path(tempfile.mkdtemp(prefix="bench-backends-")), True, args.resync)
    name, child = "queued", "queued-train"
    try:
        world.kubectl("apply", "-f", "-", input=yaml.safe_dump(run_manifest(name, backend)))
        deadline = time.monotonic() + TIMEOUT
        while not child_exists(world, backend, child):
            assert time.monotonic() < deadline, f"{backend}: no training child after {TIMEOUT}s"
            drive_data_stages(world, name, world.get("pods")["items"])
            time.sleep(POLL_SECONDS)
        wait_for(f"{child} suspended by Kueue", lambda: suspended(world, backend, child), 60)
        time.sleep(SETTLE_SECONDS)
        before = ol.request_counts(world.admin)
        time.sleep(args.seconds)
        after = ol.request_counts(world.admin)
        assert suspended(world, backend, child), f"{backend}: {child} was admitted meanwhile"
    finally:
        stop_world(world)
    minutes: float = args.seconds / 60
    return (after[1] - before[1]) / minutes


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s (range {min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--resync", type=float, default=5.0)
    args = parser.parse_args()

    figures = measure_to_running(args)
    print(f"to the training pods Running ({NODES} pods x {GPUS_PER_NODE} GPUs, Kueue gang), "
          f"{args.repeats} repeats each")  # fmt: skip
    medians = {}
    for backend in BACKENDS:
        total = [f[0] for f in figures[backend]]
        backend_only = [f[1] for f in figures[backend]]
        medians[backend] = (statistics.median(total), statistics.median(backend_only))
        print(f"  {backend:10s} apply -> Running {spread(total)}; "
              f"child -> Running {spread(backend_only)}")  # fmt: skip
    base, trainjob = medians["pytorchjob"], medians["trainjob"]
    print(f"RATIO apply -> Running, TrainJob vs PyTorchJob: {trainjob[0] / base[0]:.2f}")
    print(f"RATIO child -> Running, TrainJob vs PyTorchJob: {trainjob[1] / base[1]:.2f}")

    requests = {backend: queued_requests(args, backend) for backend in BACKENDS}
    print(f"one run queued at training (held ClusterQueue), resync every {args.resync:.0f} s, "
          f"{args.seconds:.0f} s each")  # fmt: skip
    for backend in BACKENDS:
        print(f"  {backend:10s} {requests[backend]:6.1f} operator requests/min")
    if requests["pytorchjob"] <= 0:  # no baseline, no ratio: a failure, not a figure
        raise SystemExit("the PyTorchJob baseline counted no operator request: counters broken?")
    ratio = requests["trainjob"] / requests["pytorchjob"]
    print(f"RATIO queued requests/min, TrainJob vs PyTorchJob: {ratio:.2f}")


if __name__ == "__main__":
    main()
