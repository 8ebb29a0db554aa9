"""Which training backends the local cluster serves: by default those whose binaries are built
(both after `make cluster-binaries`, Trainer v2 alone after `make demo`'s build), one when named,
and a clear refusal of an unknown name (DFLASH_CLUSTER_BACKENDS or up(backends=...))."""

from __future__ import annotations

from pathlib import Path

import pytest
from dflash_dev import cluster, kueue
from dflash_dev.errors import DevError


def built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *names: str) -> None:
    """A build cache holding only these binaries."""
    for name in names:
        (tmp_path / name).touch()
    monkeypatch.setattr(cluster.binaries, "cached_path", lambda name: tmp_path / name)


def test_both_backends_by_default_and_one_when_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(cluster.BACKENDS_ENV, raising=False)
    built(monkeypatch, tmp_path, "jobset", "trainer-controller-manager", "training-operator")
    assert cluster.requested_backends() == ("trainer", "training-operator")
    monkeypatch.setenv(cluster.BACKENDS_ENV, " training-operator ")
    assert cluster.requested_backends() == ("training-operator",)
    assert cluster.requested_backends("training-operator,trainer") == (
        "trainer",
        "training-operator",
    )
    assert cluster.requested_backends(["trainer"]) == ("trainer",)


@pytest.mark.parametrize(
    ("binaries", "expected"),
    [
        # `make demo` builds Trainer v2's binaries only: its cluster has no training-operator.
        (("jobset", "trainer-controller-manager"), ("trainer",)),
        (("training-operator",), ("training-operator",)),
        (("jobset", "training-operator"), ("training-operator",)),  # the trainer half-built
        ((), ("trainer", "training-operator")),  # nothing built yet: both are built then
    ],
)
def test_by_default_the_cluster_serves_the_backends_whose_binaries_are_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, binaries: tuple[str, ...],
    expected: tuple[str, ...],
) -> None:  # fmt: skip
    monkeypatch.delenv(cluster.BACKENDS_ENV, raising=False)
    built(monkeypatch, tmp_path, *binaries)
    assert cluster.requested_backends() == expected


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
