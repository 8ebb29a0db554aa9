"""Two runs of the same name at once, in two namespaces, under one operator: each gets its own
children, its own S3 root and its own training rendezvous (two TrainJobs whose rank 0 has the
same pod DNS name in two namespaces), and both succeed."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from dflash_dev.demo.harness import STAGE_JOBS, DemoHarness


@pytest.fixture
def other_namespace(harness: DemoHarness) -> Iterator[str]:
    name = f"{harness.namespace[:50]}-b{secrets.token_hex(2)}"
    harness.cluster.kubectl("create", "namespace", name)
    yield name
    harness.cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_two_runs_of_one_name_in_two_namespaces_run_at_once_without_touching_each_other(
    harness: DemoHarness, other_namespace: str
) -> None:
    namespaces = (harness.namespace, other_namespace)
    harness.prepare_namespace(other_namespace)
    harness.start_operator(namespaces)
    run = harness.build_run("twin")
    for namespace in namespaces:
        harness.apply(run, namespace)

    statuses = {}
    for namespace in namespaces:
        status = harness.wait_phase(
            "twin", "Succeeded", "Failed", "AuditFailed", namespace=namespace
        )
        assert status["phase"] == "Succeeded", harness.describe("twin", namespace)
        statuses[namespace] = status

    for namespace, status in statuses.items():
        assert harness.children("jobs", namespace) == [f"twin-{stage}" for stage in STAGE_JOBS]
        assert harness.training_children(namespace) == ["twin-train"]
        uid = harness.run("twin", namespace)["metadata"]["uid"]
        assert status["drafterUri"] == f"s3://{harness.bucket}/dflash/{namespace}/twin/{uid}/final"
        assert status["stages"]["regeneration"]["samples"] == 4 * 16
        assert status["training"]["step"] == status["training"]["totalSteps"]
        owners = {c["name"] for c in status["children"]}
        assert all(name.startswith("twin-") for name in owners)
    first, second = (statuses[ns]["checkpoint"]["uri"] for ns in namespaces)
    assert first != second
