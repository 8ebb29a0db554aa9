"""Fixtures for the process executor's tests: one executor per session on its own nodes
(`t<hex>-0/1`), state dir and loopback range, against the real control plane."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from dflash_dev.executor.testing import LocalExecutor, start_test_executor
from dflash_dev.pytest_plugin import ClusterHandle


@pytest.fixture(scope="session")
def executor(
    cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalExecutor]:
    state_dir = tmp_path_factory.mktemp("executor")
    started = start_test_executor(cluster, cluster.kubeconfig, state_dir, "--delete-nodes-on-exit")
    yield started
    started.stop()


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run `python -m dflash_dev.executor <args>` as a user would; return its result."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "dflash_dev.executor", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    return run
