"""A run naming a Secret that does not exist, end to end on the local control plane (Kueue
included) with real stage pods on the process executor, which answers a missing Secret as a
kubelet 1.36 does: an env reference (the S3 credentials) leaves the pod waiting in
CreateContainerConfigError; a volume (the CA bundle's Secret) leaves it in ContainerCreating,
saying why only in FailedMount events; both are retried. The operator, which never reads
Secrets, names it from the pod or its events, with one Warning event; once the Secret is
created the pod starts and the run goes on, with no restart."""

from __future__ import annotations

import json
from typing import Any

import trustme
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


def test_a_missing_ca_bundle_secret_is_named_from_the_kubelets_failed_mount_events(
    harness: DemoHarness,
) -> None:
    harness.start_operator()
    storage = {"caBundle": {"secretName": "corp-ca", "key": "ca.crt"}}
    run = harness.build_run("noca", storage=storage)
    harness.apply(run)

    status = harness.wait_until("a condition naming the CA Secret", "noca", missing, 180)
    condition = missing(status)
    assert condition is not None and condition["type"] == "CanaryRegenerated"
    assert condition["message"].startswith(
        "canary cannot start: Secret corp-ca (named by spec.storage.caBundle.secretName) does "
        f"not exist in namespace {harness.namespace} (the kubelet's FailedMount event on pod "
        "noca-canary-"
    ), condition["message"]
    pods = [p for p in harness.pods() if p["metadata"]["name"].startswith("noca-canary-")]
    assert pods and all(p["status"]["phase"] == "Pending" for p in pods)
    waiting = [s["state"].get("waiting") for p in pods for s in p["status"]["containerStatuses"]]
    assert {w["reason"] for w in waiting if w} == {"ContainerCreating"}
    assert warnings(harness, "noca") == ["ObjectMissing"]

    pem = trustme.CA().cert_pem.bytes().decode()
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "corp-ca", "namespace": harness.namespace},
              "stringData": {"ca.crt": pem}}  # fmt: skip
    harness.cluster.kubectl("apply", "-f", "-", input=json.dumps(secret))
    status = harness.wait_until(
        "the canary to go on", "noca", lambda s: s.get("phase") not in (None, "Pending", "Canary")
    )
    assert missing(status) is None, harness.describe("noca")
    assert warnings(harness, "noca") == ["ObjectMissing"]
