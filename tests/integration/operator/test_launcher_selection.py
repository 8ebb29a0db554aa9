"""`launcher: auto` on the real API server: a cluster that serves only the training-operator's
PyTorchJob trains as a PyTorchJob, one that serves only Kubeflow Trainer v2's TrainJob trains as
a TrainJob (referencing the runtime and carrying the operator's runtime patch), and the choice
is recorded in status.launcher. An API is taken away by marking its CRD version not served."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from dflash_dev.kube_wait import get_json, wait_for

from .conftest import minimal_runtime, serve_crd_version

EARLIER = ("regen", "audit-completions", "tokenize", "audit-tokens")
TRAINJOBS = ("trainjobs.trainer.kubeflow.org", "v1alpha1")
PYTORCHJOBS = ("pytorchjobs.kubeflow.org", "v1")


@pytest.fixture
def only(cluster: Any, trainer_crds: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """Serve one backend's API (the test's parameter) and not the other's, then both again."""
    hidden = PYTORCHJOBS if request.param == "trainjob" else TRAINJOBS
    serve_crd_version(cluster, *hidden, False)
    try:
        yield str(request.param)
    finally:
        serve_crd_version(cluster, *hidden, True)


def to_training(harness: Any, make_spec: Any, runtime: str) -> None:
    harness.start_operator(
        env={"DFLASH_DEFAULT_LAUNCHER": "auto", "DFLASH_TRAINING_RUNTIME": runtime}
    )
    harness.apply_run("r1", make_spec())
    for stage in EARLIER:
        count = 2 if stage == "regen" else 1
        harness.finish(f"r1-{stage}", harness.stage_results[stage], count=count)


@pytest.mark.parametrize("only", ["pytorchjob"], indirect=True)
def test_auto_trains_as_a_pytorchjob_where_only_the_training_operator_is_served(
    harness: Any, make_spec: Any, only: str
) -> None:
    to_training(harness, make_spec, runtime="unused")
    wait_for("r1-train", lambda: "r1-train" in harness.names("pytorchjobs"), 60)
    assert harness.status("r1")["launcher"] == "pytorchjob"
    harness.running_pods("r1-train", 2)


@pytest.mark.parametrize("only", ["trainjob"], indirect=True)
def test_auto_trains_as_a_trainjob_where_only_trainer_v2_is_served(
    harness: Any, make_spec: Any, only: str, cluster: Any
) -> None:
    runtime = f"dflash-{harness.namespace}"
    body = minimal_runtime(runtime)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    try:
        to_training(harness, make_spec, runtime=runtime)
        wait_for("r1-train", lambda: "r1-train" in harness.names("trainjobs"), 60)
        assert harness.status("r1")["launcher"] == "trainjob"
        job = get_json(cluster, "trainjob/r1-train", "-n", harness.namespace)
        assert job["spec"]["runtimeRef"]["name"] == runtime
        # Ours, and Kueue's beside it (its webhook adds its own patch): they coexist.
        managers = [p["manager"] for p in job["spec"]["runtimePatches"]]
        assert managers.count("dflash.dev/operator") == 1
        assert set(managers) <= {"dflash.dev/operator", "kueue.x-k8s.io/manager"}
    finally:
        cluster.kubectl("delete", "clustertrainingruntime", runtime, "--ignore-not-found")
