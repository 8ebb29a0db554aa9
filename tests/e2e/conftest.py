"""End to end: real DFlashRuns on the shared local control plane, every pod a local process.

Each test has its own namespace, S3 bucket and operator process (watching only its namespaces,
with the chart's RBAC and its cpu pool pinned to this session's own process executor), so it
shares nothing with other tests or other people's runs on the same cluster. Sizes are the
demo's (hack/dflash_dev/demo/), shrunk so a whole run takes a minute or two on 2 cores.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from dflash_dev import operator_local
from dflash_dev.demo import assets
from dflash_dev.demo.harness import DemoHarness
from dflash_dev.executor.testing import LocalExecutor, start_test_executor
from dflash_dev.pytest_plugin import ClusterHandle, S3Handle


@pytest.fixture(scope="session")
def e2e_executor(
    cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalExecutor]:
    """This session's own executor: its nodes take only the pods of this session's pools."""
    executor = start_test_executor(cluster, cluster.kubeconfig, tmp_path_factory.mktemp("executor"))
    yield executor
    executor.stop()


@pytest.fixture(scope="session")
def operator_kubeconfig(cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's CRD and RBAC applied (default values); a kubeconfig of its ServiceAccount."""
    operator_local.install(cluster.kubeconfig)
    workdir = tmp_path_factory.mktemp("operator")
    return operator_local.token_kubeconfig(cluster.kubeconfig, workdir / "operator.kubeconfig")


@pytest.fixture(scope="session")
def tiny_target() -> Path:
    return assets.ensure_tiny_target()


@pytest.fixture
def harness(
    cluster: ClusterHandle,
    s3: S3Handle,
    e2e_executor: LocalExecutor,
    operator_kubeconfig: Path,
    tiny_target: Path,
    namespace: str,
    tmp_path: Path,
) -> Iterator[DemoHarness]:
    h = DemoHarness(
        cluster, s3, e2e_executor, operator_kubeconfig, tmp_path, namespace,
        bucket=f"e2e-{secrets.token_hex(5)}", target=tiny_target,
    )  # fmt: skip
    h.prepare_namespace(namespace)
    yield h
    h.stop()
