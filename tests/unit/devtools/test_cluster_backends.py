"""Which training backends the local cluster serves: both by default, one when named, and a
clear refusal of an unknown name (DFLASH_CLUSTER_BACKENDS or up(backends=...))."""

from __future__ import annotations

import pytest
from dflash_dev import cluster, kueue
from dflash_dev.errors import DevError


def test_both_backends_by_default_and_one_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cluster.BACKENDS_ENV, raising=False)
    assert cluster.requested_backends() == ("trainer", "training-operator")
    monkeypatch.setenv(cluster.BACKENDS_ENV, " training-operator ")
    assert cluster.requested_backends() == ("training-operator",)
    assert cluster.requested_backends("training-operator,trainer") == (
        "trainer",
        "training-operator",
    )
    assert cluster.requested_backends(["trainer"]) == ("trainer",)


@pytest.mark.parametrize("value", ["trainer,kubelet", "v2"])
def test_an_unknown_backend_is_refused_naming_the_accepted_ones(value: str) -> None:
    with pytest.raises(DevError, match=r"unknown training backend .*; accepted: trainer "):
        cluster.requested_backends(value)


def test_each_layout_runs_its_backends_controllers_and_restarts_on_a_change() -> None:
    assert cluster.components(["trainer"])[-3:] == ("jobset", "trainer", "kueue")
    assert "training-operator" not in cluster.components(["trainer"])
    assert "jobset" not in cluster.components(["training-operator"])
    assert cluster.layout(["trainer"]) != cluster.layout(["trainer", "training-operator"])


def test_kueue_manages_the_served_kinds_and_registers_only_their_webhooks() -> None:
    both = kueue.frameworks(with_trainer=True, with_training_operator=True)
    assert both == ("batch/job", "trainer.kubeflow.org/trainjob", "kubeflow.org/pytorchjob")
    assert kueue.frameworks(with_trainer=False, with_training_operator=True) == (
        "batch/job",
        "kubeflow.org/pytorchjob",
    )
