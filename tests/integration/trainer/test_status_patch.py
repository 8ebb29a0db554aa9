"""The trainer patches its run's status (contract section 6) as a ServiceAccount that may only
get/patch that one run's status; a failed patch is a warning, never a training failure."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev.pytest_plugin import ClusterHandle
from dflash_trainer.train.progress import (
    StatusPatcher,
    StepMetrics,
    build_checkpoint_patch,
    build_training_patch,
)

ROOT = Path(__file__).parents[3]
CRD = ROOT / "crds" / "dflash.dev_dflashruns.yaml"
RUN = ROOT / "examples" / "tiny-cpu.yaml"
METRICS = StepMetrics(
    step=7,
    total_steps=64,
    epoch=0.5,
    loss=2.5,
    accuracy=0.25,
    per_position_accuracy=[0.4, 0.2],
    tokens_per_second=1234.5,
    eta_seconds=90.0,
    lr=1e-3,
    anchors=100,
    target_seconds=0.1,
    drafter_seconds=0.2,
)


def rbac_for(run: str, namespace: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "patch-own-status"},
            "rules": [
                {
                    "apiGroups": ["dflash.dev"],
                    "resources": ["dflashruns/status"],
                    "resourceNames": [run],
                    "verbs": ["get", "patch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "trainer-patches-status"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "patch-own-status",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": namespace}],
        },
    ]


def service_account_kubeconfig(cluster: ClusterHandle, namespace: str, path: Path) -> Path:
    """A kubeconfig that authenticates with the `trainer` ServiceAccount's bound token."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    token = cluster.kubectl("create", "token", "trainer", "-n", namespace).stdout.strip()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": admin["clusters"][0]["cluster"]}],
                "users": [{"name": "trainer", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "trainer"}}],
                "current-context": "c",
            }
        )
    )
    return path


@pytest.fixture
def run_name(cluster: ClusterHandle, namespace: str) -> str:
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=dflash-trainer-tests",
        "-f",
        str(CRD),
    )
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/dflashruns.dflash.dev", "--timeout=60s"
    )
    manifest = yaml.safe_load(RUN.read_text())
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))
    for obj in rbac_for(manifest["metadata"]["name"], namespace):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))
    return str(manifest["metadata"]["name"])


def test_progress_and_checkpoints_reach_the_run_status_with_only_its_own_rbac(
    cluster: ClusterHandle,
    namespace: str,
    run_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kubeconfig = service_account_kubeconfig(cluster, namespace, tmp_path / "sa.kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("DFLASH_RUN_NAME", run_name)
    monkeypatch.setenv("DFLASH_RUN_NAMESPACE", namespace)
    patcher = StatusPatcher(interval_seconds=0)
    assert patcher.send(build_training_patch(METRICS))
    assert patcher.send(
        build_checkpoint_patch(12, "s3://b/run/checkpoints/step-000000012", "ab" * 32)
    )
    run = json.loads(
        cluster.kubectl("get", "dflashrun", run_name, "-n", namespace, "-o", "json").stdout
    )
    training, checkpoint = run["status"]["training"], run["status"]["checkpoint"]
    assert (training["step"], training["totalSteps"], training["loss"]) == (7, 64, 2.5)
    assert training["epoch"] == 0.5 and training["tokensPerSecond"] == 1234.5
    assert checkpoint == {
        "uri": "s3://b/run/checkpoints/step-000000012",
        "step": 12,
        "sha256": "ab" * 32,
        "time": checkpoint["time"],
    }


def test_a_patch_the_api_refuses_is_a_warning_and_training_goes_on(
    cluster: ClusterHandle,
    namespace: str,
    run_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kubeconfig = service_account_kubeconfig(cluster, namespace, tmp_path / "sa.kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("DFLASH_RUN_NAME", "another-run")  # not allowed by the Role
    monkeypatch.setenv("DFLASH_RUN_NAMESPACE", namespace)
    with caplog.at_level(logging.WARNING):
        assert not StatusPatcher(interval_seconds=0).send(build_training_patch(METRICS))
    assert f"status patch of {namespace}/another-run failed" in caplog.text


def test_outside_a_run_the_patcher_stays_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DFLASH_RUN_NAME", raising=False)
    patcher = StatusPatcher(interval_seconds=0)
    assert not patcher.enabled and not patcher.send(build_training_patch(METRICS))
