"""The operator's /readyz on the real control plane: Ready with the training-operator's
PyTorchJob CRD, 503 with the reason while its API is not served (then Ready, same process), a
CRD that is not installed named in the answer, and a standby Ready while another replica leads.

The API is taken away as in test_training_operator_missing.py: the CRD's only version is marked
`served: false` (a 404 on the resource, as without the CRD), then put back."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
from dflash_dev import operator_local
from dflash_dev.kube_wait import wait_for
from dflash_operator.api.spec_training import Launcher
from dflash_operator.readiness import BACKEND_CRDS, ReadinessServer, TrainingCrd, check_crd
from dflash_operator.runtime.kube import Kube, load_api_client

from .conftest import serve_pytorchjobs


def test_503_with_the_reason_without_the_pytorchjob_api_and_ready_once_it_is_served(
    harness: Any, cluster: Any
) -> None:
    """The operator starts without the API, as in test_training_operator_missing.py. (An API
    taken away under a running PyTorchJob watch makes kopf exit on the watch's 404, at times:
    the kubelet restarts the pod; not what this test is about.)"""
    serve_pytorchjobs(cluster, False)
    try:
        operator = harness.start_operator()  # live: /healthz answers
        answer = wait_for("/readyz to answer 503", lambda: (a := operator.readyz())[0] == 503 and a)
        assert answer[1] == (
            "PyTorchJob CRD pytorchjobs.kubeflow.org does not serve version v1: install the "
            "Kubeflow training-operator v1.9\n"
        )
    finally:
        serve_pytorchjobs(cluster, True)
    wait_for("/readyz to answer 200", lambda: operator.readyz()[0] == 200)
    assert operator.readyz() == (
        200, "ready: PyTorchJob CRD pytorchjobs.kubeflow.org is established\n",
    )  # fmt: skip
    assert operator.alive()  # the same process
    assert "does not serve version v1" in operator.log_tail(200)  # the kubelet shows no body


def test_a_crd_that_is_not_installed_is_not_ready_and_the_answer_names_it(
    harness: Any,
) -> None:
    """The check against the real API server, with the operator's own RBAC (list CRDs), pointed
    at a CRD name no cluster has."""
    kube = Kube(load_api_client(str(harness.operator_kubeconfig), pool_size=1), 5.0, 10.0)
    assert check_crd(kube).ready
    missing = "pytorchjobs.missing.kubeflow.org"
    target = TrainingCrd(missing, "PyTorchJob", "v1", BACKEND_CRDS[Launcher.PYTORCHJOB].install)
    server = ReadinessServer("127.0.0.1", 0, lambda: check_crd(kube, target)).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/readyz", timeout=10)
        assert refused.value.code == 503
        assert refused.value.read().decode() == (
            f"PyTorchJob CRD {missing} not installed: install the Kubeflow training-operator v1.9\n"
        )
    finally:
        server.stop()


def test_a_standby_is_ready_while_another_replica_leads(harness: Any) -> None:
    def replica(name: str) -> dict[str, str]:
        return {
            "DFLASH_LEADER_ELECTION": "true",
            "DFLASH_LEASE_NAMESPACE": operator_local.NAMESPACE,
            "POD_NAME": name,
        }

    leader = harness.start_operator(replica("op-a"))
    wait_for("op-a to lead", lambda: "dflash-operator started" in leader.log_tail(200))
    standby = harness.start_operator(replica("op-b"))
    wait_for("op-b to stand by", lambda: "standing by as op-b_" in standby.log_tail(200))
    assert standby.readyz()[0] == 200
    assert leader.readyz()[0] == 200
