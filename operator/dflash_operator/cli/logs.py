"""`kubectl dflash logs`: find the pods of a run's current (or named) stage and follow their
logs, one line prefix per pod. Pods on nodes without a kubelet (kwok's fake nodes in the local
cluster) have no logs to serve: say so, and where their output is instead.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from dflash_operator.api.constants import LABEL_ATTEMPT, LABEL_RUN, LABEL_STAGE, Stage
from dflash_operator.api.naming import child_name
from dflash_operator.cli.errors import CliError
from dflash_operator.cli.kube import Kube
from dflash_operator.cli.summary import RunSummary

# kwok marks the nodes it fakes; their kubelet endpoint port is 0 (a real kubelet: 10250).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# Labels the Job controller and Kubeflow's training-operator put on the pods they create.
CONTROLLER_POD_LABELS = ("batch.kubernetes.io/job-name", "training.kubeflow.org/job-name")
LOCAL_CLUSTER_HINT = (
    "In the local development cluster the process executor runs these pods as local "
    "processes, and their output is in its logs:"
)


@dataclass(frozen=True)
class PodTarget:
    name: str
    containers: list[str]


def _pod_attempt(pod: dict[str, Any]) -> int:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_ATTEMPT, "1")
    return int(value) if str(value).isdigit() else 1


def find_stage_pods(kube: Kube, summary: RunSummary, stage: Stage) -> list[dict[str, Any]]:
    """Pods labelled with the run and stage (newest attempt), else those of the stage's child."""
    pods = kube.list_pods(f"{LABEL_RUN}={summary.name},{LABEL_STAGE}={stage.value}")
    if pods:
        newest = max(_pod_attempt(pod) for pod in pods)
        return [pod for pod in pods if _pod_attempt(pod) == newest]
    attempt = (summary.status.attempts or {}).get(stage.value, 1)
    child = child_name(summary.name, stage, max(1, attempt))
    for label in CONTROLLER_POD_LABELS:
        pods = kube.list_pods(f"{label}={child}")
        if pods:
            return pods
    return []


def no_kubelet_reason(node: dict[str, Any] | None) -> str | None:
    """Why a node cannot serve logs, or None when it has (or may have) a kubelet."""
    if node is None:
        return None
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    endpoint = ((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint")
    port = (endpoint or {}).get("Port")
    if KWOK_NODE_ANNOTATION in annotations:
        return f"a kwok fake node ({KWOK_NODE_ANNOTATION}), kubelet port {port or 0}"
    if endpoint is not None and not port:
        return "its kubelet endpoint port is 0: no kubelet serves logs there"
    return None


def _containers(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]


@dataclass(frozen=True)
class Blocked:
    """A pod whose logs the API server cannot serve, and why."""

    pod: str
    reason: str
    no_kubelet: bool


def plan_targets(kube: Kube, pods: list[dict[str, Any]]) -> tuple[list[PodTarget], list[Blocked]]:
    """(pods whose logs can be read, pods that cannot, with the reason)."""
    readable: list[PodTarget] = []
    blocked: list[Blocked] = []
    nodes: dict[str, dict[str, Any] | None] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        name = pod["metadata"]["name"]
        node_name = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase", "Unknown")
        if not node_name:
            blocked.append(Blocked(name, f"{phase}, not scheduled to a node yet", False))
            continue
        if node_name not in nodes:
            nodes[node_name] = kube.get_node(node_name)
        reason = no_kubelet_reason(nodes[node_name])
        if reason is not None:
            blocked.append(Blocked(name, f"on node {node_name}: {reason}", True))
            continue
        readable.append(PodTarget(name, _containers(pod)))
    return readable, blocked


def explain_blocked(summary: RunSummary, stage: Stage, blocked: list[Blocked]) -> str:
    lines = "\n".join(f"  {b.pod}{' ' if b.no_kubelet else ': '}{b.reason}" for b in blocked)
    commands = [
        f"  make executor-logs POD={summary.namespace}/{b.pod} FOLLOW=1"
        for b in blocked
        if b.no_kubelet
    ]
    hint = "\n".join(["", LOCAL_CLUSTER_HINT, *commands]) if commands else ""
    return (
        f"cannot show logs of stage {stage.value} of dflashrun {summary.name}: the API server "
        f"has no logs to serve for its pods:\n{lines}{hint}"
    )


def follow_logs(
    kube: Kube,
    targets: list[PodTarget],
    follow: bool,
    tail: int | None,
    out: TextIO = sys.stdout,
) -> None:
    """Stream every container of every target; prefix lines when there is more than one."""
    streams = [(t.name, c) for t in targets for c in t.containers]
    many = len(streams) > 1
    lock = threading.Lock()
    failures: list[str] = []

    def pump(pod: str, container: str) -> Callable[[], None]:
        prefix = f"[{pod}/{container}] " if many else ""

        def run() -> None:
            try:
                for line in kube.stream_log(pod, container, follow, tail):
                    with lock:
                        out.write(f"{prefix}{line}\n")
                        out.flush()
            except CliError as exc:
                failures.append(f"{pod}/{container}: {exc.message}")

        return run

    threads = [threading.Thread(target=pump(p, c), daemon=True) for p, c in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        # A timeout keeps the main thread responsive to Ctrl-C while logs are followed.
        while thread.is_alive():
            thread.join(timeout=0.5)
    if failures:
        raise CliError("some logs could not be read:\n  " + "\n  ".join(failures))
