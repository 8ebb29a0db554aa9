"""The GitOps files against the real API server: the argocd-cm patch applies the way the docs
say, and the runs of examples/gitops/runs/ are accepted as they would be on the first sync."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from dflash_dev import third_party_crds

ROOT = Path(__file__).parents[3]
HEALTH_LUA = ROOT / "deploy/argocd/resource_customizations/dflash.dev/DFlashRun/health.lua"
CM_PATCH = ROOT / "deploy/argocd/argocd-cm-patch.yaml"
CM_KEY = "resource.customizations.health.dflash.dev_DFlashRun"


def test_the_argocd_cm_patch_adds_the_health_check_and_keeps_other_settings(plugin: Any) -> None:
    existing = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "labels": {"app.kubernetes.io/part-of": "argocd"}},
        "data": {"url": "https://argocd.example.com"},
    }  # fmt: skip
    kubectl = plugin.cluster.kubectl
    kubectl("apply", "-n", plugin.namespace, "-f", "-", input=yaml.safe_dump(existing))

    kubectl("-n", plugin.namespace, "patch", "configmap", "argocd-cm", "--type", "merge",
            "--patch-file", str(CM_PATCH))  # fmt: skip

    data = json.loads(
        kubectl("get", "configmap", "argocd-cm", "-n", plugin.namespace, "-o", "json").stdout
    )["data"]
    assert data[CM_KEY] == HEALTH_LUA.read_text()
    assert data["url"] == "https://argocd.example.com"


def test_the_runs_of_the_gitops_folder_are_accepted_by_the_api_server(plugin: Any) -> None:
    # The ExternalSecret's CRD (and the others the examples target), installed here: a test
    # that restarts the cluster with other backends (foundation/test_backends.py) drops CRDs
    # installed earlier in the session.
    for crd in third_party_crds.ensure_all():
        plugin.cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
        name = yaml.safe_load(crd.read_text())["metadata"]["name"]
        plugin.cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}",
                               "--timeout=60s")  # fmt: skip
    for path in sorted((ROOT / "examples/gitops/runs").glob("*.yaml")):
        result = plugin.cluster.kubectl(
            "apply", "--dry-run=server", "-n", plugin.namespace, "-f", str(path), check=False
        )

        assert result.returncode == 0, f"{path.name}: {result.stderr}"
