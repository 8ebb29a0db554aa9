"""Fixtures for the DFlashRun API tests: the generated CRD installed in the real cluster, a
namespace, a small kubectl client for runs, and the shared table of invalid manifests."""

from __future__ import annotations

import importlib.util
import json
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from dflash_dev.kube_wait import wait_for
from dflash_dev.pytest_plugin import ClusterHandle
from dflash_operator.api.constants import CRD_NAME

ROOT = Path(__file__).parents[3]
CRD_FILE = ROOT / "crds" / "dflash.dev_dflashruns.yaml"


def _load_cases_module() -> ModuleType:
    """manifest_cases.py by path (tests are imported in importlib mode, without sys.path)."""
    path = Path(__file__).with_name("manifest_cases.py")
    spec = importlib.util.spec_from_file_location("dflash_api_manifest_cases", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up while being defined.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


manifest_cases = _load_cases_module()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests asking for `invalid_case` run once per row of invalid_manifests.yaml."""
    if "invalid_case" in metafunc.fixturenames:
        cases = manifest_cases.load_cases()
        metafunc.parametrize("invalid_case", cases, ids=[case.id for case in cases])


@pytest.fixture
def base_manifest() -> dict[str, Any]:
    """A fresh copy of the table's valid base DFlashRun."""
    manifest: dict[str, Any] = manifest_cases.base_manifest()
    return manifest


@dataclass
class Runs:
    """kubectl for DFlashRuns in one namespace, run the way a user or the operator would."""

    cluster: ClusterHandle
    namespace: str

    def apply(self, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """`kubectl apply` (client-side, strict field validation); never raises."""
        return self.cluster.kubectl(
            "apply", "-n", self.namespace, "-f", "-", input=yaml.safe_dump(manifest), check=False
        )

    def get(self, name: str) -> dict[str, Any]:
        result = self.cluster.kubectl("get", "dflashrun", name, "-n", self.namespace, "-o", "json")
        run: dict[str, Any] = json.loads(result.stdout)
        return run

    def patch_status(self, name: str, status: dict[str, Any]) -> None:
        """A JSON merge patch on the status subresource, as the operator and trainer send it."""
        self.cluster.kubectl(
            "patch", "dflashrun", name, "-n", self.namespace, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip

    def table(self, *args: str) -> list[list[str]]:
        """`kubectl get dfr <args>` split into cells (columns are 2+ spaces apart)."""
        output = self.cluster.kubectl("get", "dfr", "-n", self.namespace, *args).stdout
        return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


@pytest.fixture(scope="session")
def dflashrun_crd(cluster: ClusterHandle) -> str:
    """The checked-in CRD, applied server-side and Established."""
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=dflash-api-tests",
        "-f", str(CRD_FILE),
    )  # fmt: skip
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    return CRD_NAME


@pytest.fixture(scope="module")
def runs(cluster: ClusterHandle, dflashrun_crd: str) -> Iterator[Runs]:
    """A namespace per test module (DFlashRuns need no ServiceAccount, so no wait)."""
    name = f"t-api-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    yield Runs(cluster, name)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def eventually() -> Any:
    return wait_for
