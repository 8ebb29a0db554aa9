"""Fixtures for applying the repository's example manifests to the real API server: the
DFlashRun CRD, and the CRDs of the tools the examples target (Argo CD, External Secrets, Sealed
Secrets; taken from their Go module zips, no controller runs), so that every object is checked
against its real schema."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from dflash_dev import third_party_crds
from dflash_dev.pytest_plugin import ClusterHandle

ROOT = Path(__file__).parents[3]
DFLASH_CRD = ROOT / "crds" / "dflash.dev_dflashruns.yaml"


def _install(cluster: ClusterHandle, files: list[Path]) -> None:
    for path in files:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
    for path in files:
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")


@pytest.fixture(scope="session")
def example_crds(cluster: ClusterHandle) -> ClusterHandle:
    _install(cluster, [DFLASH_CRD, *third_party_crds.ensure_all()])
    return cluster


@pytest.fixture
def dry_run_apply(example_crds: ClusterHandle) -> Callable[..., None]:
    """`kubectl apply --dry-run=server` of a file: the API server's whole admission (schema,
    CEL, Pod Security) without storing anything. Fails with the server's words."""

    def apply(path: Path, namespace: str | None = None) -> None:
        args = ["apply", "--dry-run=server", "-f", str(path)]
        if namespace:
            args += ["-n", namespace]
        result = example_crds.kubectl(*args, check=False)
        assert result.returncode == 0, f"{path.relative_to(ROOT)}: {result.stderr}"

    return apply


def ensure_namespace(
    cluster: ClusterHandle, name: str, labels: dict[str, str] | None = None
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels or {}},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
