"""Fixtures of the chart tests: one release per test (a unique name, in the test's own
namespace), uninstalled afterwards with the operators the test started; helpers: chart.py.
"""

from __future__ import annotations

import importlib.util
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from dflash_dev.pytest_plugin import ClusterHandle

HELPERS = "dflash_chart_test_helpers"


def load_chart_helpers() -> ModuleType:
    """chart.py by path, once per session (tests are imported in importlib mode)."""
    if HELPERS not in sys.modules:
        spec = importlib.util.spec_from_file_location(HELPERS, Path(__file__).with_name("chart.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[HELPERS] = module
        spec.loader.exec_module(module)
    return sys.modules[HELPERS]


chart = load_chart_helpers()


@pytest.fixture
def other_namespace(cluster: ClusterHandle) -> Iterator[str]:
    """A second fresh namespace: one the release does not watch."""
    name = f"t-chart-other-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def release(cluster: ClusterHandle, namespace: str, tmp_path: Path) -> Iterator[chart.Release]:
    """A release name for this test in the test's namespace; uninstalled at the end."""
    installed = chart.Release(cluster, chart.unique_release(), namespace, tmp_path)
    yield installed
    for harness in installed.harnesses:
        harness.stop_operators()
        for process in harness.operators:
            print(f"--- {process.log_path.name}\n{process.log_tail(60)}")
    installed.helm("uninstall", installed.name, "--wait", "--timeout=120s", check=False)
