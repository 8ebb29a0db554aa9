"""A cluster without the Kubeflow training-operator, on the real control plane (the operator
defaults to the PyTorchJob backend here): the run stops at training with one clear condition
(no Warning per retry, no create tried), and training starts by itself once the PyTorchJob API
appears, with the operator still the same process, watching it.

The API is taken away by marking the CRD's only version `served: false` (exactly what the API
server shows a cluster without the CRD: a 404 on the resource), then put back; nothing stored
is lost and the cluster's other tests keep their PyTorchJobs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from dflash_dev.kube_wait import wait_for

from .conftest import serve_pytorchjobs

EARLIER = ("regen", "audit-completions", "tokenize", "audit-tokens")


@pytest.fixture
def no_pytorchjob_api(cluster: Any) -> Iterator[None]:
    serve_pytorchjobs(cluster, False)
    try:
        yield
    finally:
        serve_pytorchjobs(cluster, True)


def _creates(text: str) -> float:
    """POSTs of PyTorchJobs the operator made, whatever their answer."""
    pattern = r'dflash_api_requests_total\{code="(\d+)",kind="PyTorchJob",verb="POST"\} ([0-9.e+]+)'
    return sum(float(value) for _, value in re.findall(pattern, text))


def test_training_waits_with_one_condition_and_starts_when_the_crd_appears(
    harness: Any, make_spec: Any, no_pytorchjob_api: None, cluster: Any
) -> None:
    operator = harness.start_operator()
    harness.apply_run("r1", make_spec())
    for stage in EARLIER:
        harness.finish(
            f"r1-{stage}", harness.stage_results[stage], count=2 if stage == "regen" else 1
        )

    trained = wait_for(
        "Trained to say TrainingApiMissing",
        lambda: (
            (c := harness.condition("r1", "Trained")) and c["reason"] == "TrainingApiMissing" and c
        ),
    )
    # API discovery says what is missing before anything is created: no create is tried.
    assert (
        "needs PyTorchJob (kubeflow.org/v1), which this cluster does not serve"
        in (trained["message"])
    )
    assert "install the Kubeflow training-operator v1" in trained["message"]
    assert harness.status("r1")["phase"] == "Training"
    assert _creates(operator.metrics()) == 0
    warnings = [(r, m) for t, r, m in harness.events("r1") if t == "Warning"]
    assert [r for r, _ in warnings] == ["TrainingApiMissing"], warnings

    serve_pytorchjobs(cluster, True)
    # Discovery is cached 30 s and the run looked at again every 30 s.
    wait_for("r1-train", lambda: "r1-train" in harness.names("pytorchjobs"), 90)
    wait_for(
        "Trained to say StageRunning",
        lambda: (harness.condition("r1", "Trained") or {}).get("reason") == "StageRunning",
    )
    assert operator.process is not None and operator.process.poll() is None  # the same process
    harness.running_pods("r1-train", 2)  # the training-operator made its pods
