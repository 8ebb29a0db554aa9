"""A run naming an S3 credentials Secret that does not exist, end to end on the local control
plane (Kueue included) with real stage pods on the process executor, which answers a missing
Secret as a kubelet does (the pod waits in CreateContainerConfigError and is retried). The
operator, which never reads Secrets, names it from the pod within one resync, with one Warning
event; once the Secret is created the pod starts and the run goes on, with no restart."""

from __future__ import annotations

import json
from typing import Any

from dflash_dev.demo import environment
from dflash_dev.demo.harness import DemoHarness
from dflash_dev.kube_wait import get_json


def warnings(harness: DemoHarness, run: str) -> list[str]:
    items = get_json(
        harness.cluster, "events", "-n", harness.namespace, "--field-selector",
        f"involvedObject.name={run},involvedObject.kind=DFlashRun",
    )["items"]  # fmt: skip
    return [e["reason"] for e in items if e["type"] == "Warning"]


def missing(status: dict[str, Any]) -> dict[str, Any] | None:
    for condition in status.get("conditions") or ():
        if condition.get("reason") == "ObjectMissing":
            return dict(condition)
    return None


def test_a_missing_secret_is_named_from_the_pod_and_the_run_goes_on_once_it_exists(
    harness: DemoHarness,
) -> None:
    harness.start_operator()
    run = harness.build_run("nosecret", storage={"credentialsSecretRef": {"name": "s3-later"}})
    harness.apply(run)

    status = harness.wait_until("a condition naming the Secret", "nosecret", missing, 180)
    condition = missing(status)
    assert condition is not None and condition["type"] == "CanaryRegenerated"
    assert condition["message"].startswith(
        "canary cannot start: Secret s3-later (named by spec.storage.credentialsSecretRef.name) "
        f"does not exist in namespace {harness.namespace} (the kubelet's "
        "CreateContainerConfigError on pod nosecret-canary-"
    )
    assert status["phase"] == "Canary" and status["message"] == condition["message"]
    assert warnings(harness, "nosecret") == ["ObjectMissing"]

    secret = environment.build_s3_secret("s3-later", harness.namespace, harness.s3.info)
    harness.cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))
    status = harness.wait_until(
        "the canary to go on",
        "nosecret",
        lambda s: s.get("phase") not in (None, "Pending", "Canary"),
    )
    assert missing(status) is None, harness.describe("nosecret")
    assert warnings(harness, "nosecret") == ["ObjectMissing"]
