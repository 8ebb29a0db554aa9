"""The chart's ClusterTrainingRuntime: rendered only where the cluster serves Kubeflow Trainer
v2 (and training.runtime.enabled), shaped as the operator's TrainJobs expect (a `node`
replicated Job and container, restricted security, no in-place restarts), and accepted by the
Trainer v2.3.0 CRD schema; the operator is told its name and the default launcher."""

from __future__ import annotations

import sys
from typing import Any

from dflash_dev import openapi_check, third_party_crds

chart = sys.modules["dflash_chart_test_helpers"]
TRAINER_API = "trainer.kubeflow.org/v1alpha1/ClusterTrainingRuntime"


def runtimes(*args: str) -> list[dict[str, Any]]:
    return [m for m in chart.render(*args) if m["kind"] == "ClusterTrainingRuntime"]


def env(manifests: list[dict[str, Any]]) -> dict[str, str]:
    deployment = chart.only(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_runtime_is_shipped_only_where_the_trainer_api_is_served() -> None:
    assert runtimes() == []  # no Trainer v2: installing it would fail
    assert len(runtimes("--api-versions", TRAINER_API)) == 1
    off = ("--api-versions", TRAINER_API, "--set", "training.runtime.enabled=false")
    assert runtimes(*off) == []


def test_the_runtime_fits_the_trainer_v2_3_schema_and_the_operators_patch() -> None:
    (runtime,) = runtimes("--api-versions", TRAINER_API, "--set", "training.runtime.name=dfl")
    assert runtime["metadata"]["name"] == "dfl"
    schema = openapi_check.crd_schema(third_party_crds.ensure("kubeflow-trainer")[1], "v1alpha1")
    assert openapi_check.validate(runtime, schema) == []
    spec = runtime["spec"]["template"]["spec"]
    assert spec["failurePolicy"]["maxRestarts"] == 0  # the operator spends maxRestarts
    (node,) = spec["replicatedJobs"]
    assert node["name"] == "node"
    pod = node["template"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "node"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_operator_gets_the_default_launcher_and_the_runtimes_name() -> None:
    manifests = chart.render("--set", "training.defaultLauncher=pytorchjob",
                             "--set", "training.runtime.name=dfl")  # fmt: skip
    assert env(manifests)["DFLASH_DEFAULT_LAUNCHER"] == "pytorchjob"
    assert env(manifests)["DFLASH_TRAINING_RUNTIME"] == "dfl"
