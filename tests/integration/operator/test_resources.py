"""Stage pods in a namespace whose ResourceQuota covers cpu, memory and ephemeral storage, on
the real control plane: the quota admits them only because every pod has requests and
limits (BestEffort pods are refused: "must specify limits.cpu ..."), and /tmp is sized by
the pod's ephemeral storage."""

from __future__ import annotations

import json
from typing import Any

QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "team-quota"},
    "spec": {
        "hard": {
            "requests.cpu": "500",
            "requests.memory": "4Ti",
            "limits.cpu": "1000",
            "limits.memory": "4Ti",
            "requests.ephemeral-storage": "4Ti",
            "limits.ephemeral-storage": "4Ti",
        }
    },
}


def test_a_namespace_with_a_resource_quota_admits_every_stage_pod(
    harness: Any, make_spec: Any
) -> None:
    harness.kubectl("apply", "-f", "-", input=json.dumps(QUOTA))
    harness.start_operator()
    spec = make_spec()
    spec["regeneration"]["resources"] = {"requests": {"memory": "120Gi"}}
    harness.apply_run("r1", spec)

    pods = harness.running_pods("r1-regen", 2)
    for pod in pods:
        container = pod["spec"]["containers"][0]
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert requests["memory"] == limits["memory"] == "120Gi"  # the spec over the default
        assert {"cpu", "memory", "ephemeral-storage"} <= set(limits)
        tmp = next(v for v in pod["spec"]["volumes"] if v["name"] == "tmp")
        assert tmp["emptyDir"]["sizeLimit"] == limits["ephemeral-storage"]
    for stage in ("regen", "audit-completions", "tokenize", "audit-tokens"):
        harness.finish(
            f"r1-{stage}", harness.stage_results[stage], count=2 if stage == "regen" else 1
        )
    harness.running_pods("r1-train", 2)  # the PyTorchJob's pods, admitted by the quota too
    used = json.loads(harness.kubectl("get", "resourcequota", "team-quota", "-o", "json").stdout)[
        "status"
    ]["used"]
    assert float(used["limits.cpu"]) > 0
