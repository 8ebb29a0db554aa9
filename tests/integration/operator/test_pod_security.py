"""Pod Security admission on the real API server: every stage pod of a run (canary,
regeneration, audits, tokenization, both PyTorchJob replicas, evaluation) is admitted in a
namespace that enforces "restricted"; a pool that adds a capability (IPC_LOCK for RDMA) is
refused there, which is why docs/install-production.md asks "privileged" for such namespaces."""

from __future__ import annotations

import json
from typing import Any

from dflash_dev.kube_wait import get_json, wait_for

from .conftest import is_rank_zero

RESTRICTED = (
    "pod-security.kubernetes.io/enforce=restricted",
    "pod-security.kubernetes.io/enforce-version=latest",
)


def enforce_restricted(harness: Any) -> None:
    harness.cluster.kubectl("label", "namespace", harness.namespace, *RESTRICTED, "--overwrite")


def end_stage(harness: Any, stage: str) -> None:
    """End the stage's pods, training's other ranks before rank 0."""
    count = {"regen": 2, "train": 2}.get(stage, 1)
    pods = harness.running_pods(f"r1-{stage}", count)
    pods.sort(key=is_rank_zero)
    for pod in pods:
        harness.finish_pod(pod, harness.stage_results[stage])


def test_every_stage_pod_is_admitted_where_pod_security_is_restricted(
    harness: Any, make_spec: Any
) -> None:
    enforce_restricted(harness)
    harness.start_operator()
    spec = make_spec()
    spec["regeneration"]["canary"] = {"samplesPerSource": 16}
    harness.stage_phases = {
        "canary": "Canary",
        "audit-canary": "AuditingCanary",
        **harness.stage_phases,
    }
    harness.apply_run("r1", spec)

    for stage, phase in harness.stage_phases.items():
        harness.wait_phase("r1", phase)
        end_stage(harness, stage)

    harness.wait_phase("r1", "Succeeded")
    refused = [
        e["message"]
        for e in get_json(harness.cluster, "events", "-n", harness.namespace)["items"]
        if e["reason"] == "FailedCreate"
    ]
    assert refused == []


def test_a_pool_that_adds_a_capability_is_refused_where_pod_security_is_restricted(
    harness: Any, make_spec: Any
) -> None:
    enforce_restricted(harness)
    rdma = dict(harness.pools["nodePools"]["b200"])
    rdma["addCapabilities"] = ["IPC_LOCK"]
    harness.pools["nodePools"]["b200-rdma"] = rdma
    harness.start_operator()
    spec = make_spec()
    spec["regeneration"]["nodePool"] = "b200-rdma"
    harness.apply_run("r1", spec)

    def refused() -> list[str] | None:
        events = get_json(
            harness.cluster, "events", "-n", harness.namespace,
            "--field-selector", "involvedObject.name=r1-regen,reason=FailedCreate",
        )["items"]  # fmt: skip
        return [e["message"] for e in events] or None

    messages = wait_for("the Job controller's FailedCreate", refused, 60)
    assert "violates PodSecurity" in messages[0] and "IPC_LOCK" in messages[0], json.dumps(messages)
    assert harness.pods_of("r1-regen") == []
