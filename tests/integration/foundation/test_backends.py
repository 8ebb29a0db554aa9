"""The local cluster with one training backend: a Trainer-v2-only cluster serves TrainJob and no
PyTorchJob, a training-operator-only cluster the reverse, and Kueue manages exactly the kinds
served (what `launcher: auto` and a platform without the v1 operator look like)."""

from __future__ import annotations

from collections.abc import Callable

import yaml
from dflash_dev import cluster as local_cluster
from dflash_dev import kueue
from dflash_dev.pytest_plugin import ClusterHandle


def served_kinds(cluster: ClusterHandle) -> set[str]:
    out = cluster.kubectl("api-resources", "-o", "name").stdout.split()
    return {name for name in out if name in {"trainjobs.trainer.kubeflow.org",
                                             "jobsets.jobset.x-k8s.io",
                                             "pytorchjobs.kubeflow.org"}}  # fmt: skip


def kueue_frameworks() -> list[str]:
    info = local_cluster.read_info()
    assert info is not None
    config = yaml.safe_load((local_cluster.state_dir() / "kueue-config.yaml").read_text())
    return list(config["integrations"]["frameworks"])


def test_a_trainer_only_cluster_serves_trainjob_and_jobset_and_no_pytorchjob(
    cluster_backends: Callable[[str], ClusterHandle],
) -> None:
    only = cluster_backends("trainer")
    assert served_kinds(only) == {"trainjobs.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"}
    assert kueue_frameworks() == [kueue.JOB_FRAMEWORK, kueue.TRAINJOB_FRAMEWORK]
    runtimes = only.kubectl("get", "clustertrainingruntimes", "-o", "name").stdout.split()
    assert "clustertrainingruntime.trainer.kubeflow.org/torch-distributed" in runtimes


def test_a_training_operator_only_cluster_serves_pytorchjob_and_no_trainjob(
    cluster_backends: Callable[[str], ClusterHandle],
) -> None:
    only = cluster_backends("training-operator")
    assert served_kinds(only) == {"pytorchjobs.kubeflow.org"}
    assert kueue_frameworks() == [kueue.JOB_FRAMEWORK, kueue.PYTORCHJOB_FRAMEWORK]
