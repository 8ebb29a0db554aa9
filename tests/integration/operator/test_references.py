"""No silent hang, on the real control plane with the real Kueue: a queued run naming a
PriorityClass that does not exist (Kueue could make no Workload for its Job and would say so
only in its log), and a run naming a LocalQueue and a ServiceAccount that do not exist. Each
shows its stage's condition naming the object, with one Warning event, before any child
exists; once the objects are created the run goes on, with the operator still the same process.
(A missing Secret needs a kubelet: tests/e2e/test_missing_secret.py, on the process executor.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from dflash_dev.kube_wait import wait_for

from .conftest import imported_spec, serve_crd_version

# Another retry of the creation (10 s) and two resyncs (5 s) while the object is missing.
QUIET_SECONDS = 12
LOCAL_QUEUE_CRD = "localqueues.kueue.x-k8s.io"


@pytest.fixture
def cpu_queue(harness: Any) -> Iterator[str]:
    """A ClusterQueue (a flavor without node labels, ample quota) for this test's namespace
    only, and its LocalQueue `team`."""
    suffix = harness.namespace[-6:]
    flavor, cluster_queue = f"refs-{suffix}", f"refs-{suffix}"
    objects = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": flavor}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": cluster_queue},
         "spec": {
             "namespaceSelector": {
                 "matchLabels": {"kubernetes.io/metadata.name": harness.namespace}},
             "resourceGroups": [{
                 "coveredResources": ["cpu", "memory", "ephemeral-storage"],
                 "flavors": [{"name": flavor, "resources": [
                     {"name": "cpu", "nominalQuota": 1000},
                     {"name": "memory", "nominalQuota": "64Ti"},
                     {"name": "ephemeral-storage", "nominalQuota": "64Ti"}]}],
             }]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "team", "namespace": harness.namespace},
         "spec": {"clusterQueue": cluster_queue}},
    ]  # fmt: skip
    harness.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    yield "team"
    harness.cluster.kubectl("delete", "clusterqueue", cluster_queue, "--wait=false", check=False)
    harness.cluster.kubectl("delete", "resourceflavor", flavor, "--wait=false", check=False)


def score_first(make_spec: Any, **extra: Any) -> dict[str, Any]:
    """A run whose first stage is the score stage (imported completions, on the cpu pool)."""
    return imported_spec(make_spec, **extra, evaluation={"enabled": False})


def missing_condition(harness: Any, run: str, type_: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        f"{type_} to say ObjectMissing",
        lambda: (c := harness.condition(run, type_)) and c["reason"] == "ObjectMissing" and c,
    )
    return found


def warning_reasons(harness: Any, run: str) -> list[str]:
    return [reason for type_, reason, _ in harness.events(run) if type_ == "Warning"]


def test_a_queued_run_naming_a_missing_priority_class_says_so_and_goes_on_once_it_exists(
    harness: Any, make_spec: Any, cpu_queue: str
) -> None:
    priority = f"dflash-refs-{harness.namespace[-6:]}"
    operator = harness.start_operator()
    harness.apply_run("r1", score_first(make_spec, queueName=cpu_queue, priorityClassName=priority))

    condition = missing_condition(harness, "r1", "LikelihoodScored")
    assert condition["status"] == "False"
    assert condition["message"].startswith(
        f"score cannot start: PriorityClass {priority} (named by "
        "spec.priorityClassName) does not exist. Create it, or change the field that names it"
    )
    status = harness.status("r1")
    assert status["phase"] == "Scoring" and status["message"] == condition["message"]
    assert harness.names("jobs") == []  # no child waits on it (the ConfigMap is made)
    time.sleep(QUIET_SECONDS)
    assert harness.names("jobs") == []
    assert warning_reasons(harness, "r1") == ["ObjectMissing"]  # one, not one per retry

    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
          "metadata": {"name": priority}, "value": 100, "preemptionPolicy": "Never"}  # fmt: skip
    harness.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(pc))
    try:
        wait_for("the score Job", lambda: "r1-score" in harness.names("jobs"))
        (pod,) = harness.running_pods("r1-score", 1)  # Kueue admitted it
        assert pod["spec"]["priorityClassName"] == priority
        wait_for(
            "LikelihoodScored to say StageRunning",
            lambda: (
                (harness.condition("r1", "LikelihoodScored") or {}).get("reason") == "StageRunning"
            ),
        )
        admitted = wait_for(
            "Admitted",
            lambda: (c := harness.condition("r1", "Admitted")) and c["status"] == "True" and c,
        )
        assert "ClusterQueue refs-" in admitted["message"]
        assert operator.process is not None and operator.process.poll() is None
        assert warning_reasons(harness, "r1") == ["ObjectMissing"]
    finally:
        harness.cluster.kubectl("delete", "priorityclass", priority, "--wait=false", check=False)


def test_a_run_naming_a_missing_queue_and_account_names_both_and_goes_on_once_they_exist(
    harness: Any, make_spec: Any, cpu_queue: str
) -> None:
    harness.start_operator()
    spec = score_first(make_spec, queueName="later", serviceAccountName="s3-reader")
    harness.apply_run("r1", spec)

    condition = missing_condition(harness, "r1", "LikelihoodScored")
    ns = harness.namespace
    assert (
        f"LocalQueue later (named by spec.queueName) does not exist in namespace {ns}; "
        f"ServiceAccount s3-reader (named by spec.serviceAccountName) does not exist in "
        f"namespace {ns}."
    ) in condition["message"]
    assert harness.names("jobs") == []

    harness.kubectl("create", "serviceaccount", "s3-reader")
    condition = wait_for(
        "only the queue to be missing",
        lambda: (
            (c := harness.condition("r1", "LikelihoodScored"))
            and "ServiceAccount" not in c["message"]
            and c
        ),
    )
    assert "LocalQueue later" in condition["message"]
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "later", "namespace": ns},
             "spec": {"clusterQueue": f"refs-{ns[-6:]}"}}  # fmt: skip
    harness.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(queue))
    (pod,) = harness.running_pods("r1-score", 1)
    assert pod["spec"]["serviceAccountName"] == "s3-reader"
    assert warning_reasons(harness, "r1") == ["ObjectMissing"]


@pytest.fixture
def no_local_queue_api(cluster: Any) -> Iterator[None]:
    """The cluster stops serving Kueue's LocalQueue at v1beta2 (the version the operator looks
    queues up at), as on a cluster without Kueue >= 0.15; served again afterwards."""
    serve_crd_version(cluster, LOCAL_QUEUE_CRD, "v1beta2", False)
    try:
        yield
    finally:
        serve_crd_version(cluster, LOCAL_QUEUE_CRD, "v1beta2", True)


def test_a_queue_on_a_cluster_that_does_not_serve_the_local_queue_api_names_the_api_and_never_blocks(
    harness: Any, make_spec: Any, no_local_queue_api: None
) -> None:
    """A 404 on the LocalQueue lookup is "not served" here, not "missing": API discovery says
    so. The run's Admitted condition names the API and what to install, the stage's child is
    created (queued, never held back), and nothing is ever ObjectMissing."""
    harness.start_operator()
    harness.apply_run("r1", score_first(make_spec, queueName="team"))

    try:
        admitted = wait_for(
            "Admitted to name the API",
            lambda: (
                (c := harness.condition("r1", "Admitted")) and "is not served" in c["message"] and c
            ),
        )
    except AssertionError as error:
        raise AssertionError(f"{error}: {harness.status('r1').get('conditions')}") from None
    assert admitted["status"] == "False"
    assert "Kueue LocalQueue v1beta2 is not served: install Kueue >= 0.15" in admitted["message"]
    assert harness.names("jobs") == ["r1-score"]  # created, not blocked
    time.sleep(QUIET_SECONDS)  # retries and resyncs: it stays so
    scored = harness.condition("r1", "LikelihoodScored")
    assert scored is not None and scored["reason"] != "ObjectMissing", scored
    assert "ObjectMissing" not in warning_reasons(harness, "r1")
    assert harness.names("jobs") == ["r1-score"]
    # Also once Kueue has made the Workload (it says "LocalQueue team doesn't exist"): the
    # condition still names the API.
    admitted = harness.condition("r1", "Admitted")
    assert admitted is not None and "is not served" in admitted["message"], admitted
