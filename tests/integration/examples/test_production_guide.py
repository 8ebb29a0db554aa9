"""The manifests of docs/install-production.md against the real API server: the namespaces with
their Pod Security levels, the chart with the production values (server-side dry run), the
Kueue queues, the CA bundle, the production run, and the training-operator overlay built with
kustomize from the training-operator's own manifests (the version the local cluster runs)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from dflash_dev import binaries

from .conftest import ROOT

PRODUCTION = ROOT / "examples" / "production"
CHART = ROOT / "charts" / "dflash-operator"
# Kinds whose CRDs (prometheus-operator) the local cluster does not have.
NOT_SERVED_HERE = {"ServiceMonitor", "PrometheusRule"}


def test_the_namespaces_apply_with_their_pod_security_levels(example_crds: Any) -> None:
    example_crds.kubectl("apply", "-f", str(PRODUCTION / "namespaces.yaml"))

    labels = json.loads(example_crds.kubectl("get", "namespace", "ml-team", "-o", "json").stdout)[
        "metadata"
    ]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"


def test_the_chart_with_the_production_values_passes_a_server_side_dry_run(
    example_crds: Any, tmp_path: Path
) -> None:
    example_crds.kubectl("apply", "-f", str(PRODUCTION / "namespaces.yaml"))
    rendered = subprocess.run(
        [str(binaries.cached_path("helm")), "template", "dflash-operator", str(CHART),
         "-n", "dflash-system", "-f", str(PRODUCTION / "values.yaml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    documents = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    kinds = {d["kind"] for d in documents}
    assert {"Deployment", "ConfigMap", "ServiceMonitor"} <= kinds
    here = tmp_path / "rendered.yaml"
    here.write_text(yaml.safe_dump_all([d for d in documents if d["kind"] not in NOT_SERVED_HERE]))

    result = example_crds.kubectl(
        "apply", "--dry-run=server", "-n", "dflash-system", "-f", str(here), check=False
    )

    assert result.returncode == 0, result.stderr
    pools = yaml.safe_load(
        next(d for d in documents if d["kind"] == "ConfigMap")["data"]["pools.yaml"]
    )
    assert pools["nodePools"]["rtx-pro-6000"]["addCapabilities"] == ["IPC_LOCK"]


def test_queues_ca_bundle_and_the_production_run_are_accepted(
    example_crds: Any, dry_run_apply: Callable[..., None]
) -> None:
    example_crds.kubectl("apply", "-f", str(PRODUCTION / "namespaces.yaml"))

    dry_run_apply(ROOT / "examples" / "kueue" / "queues.yaml")
    dry_run_apply(PRODUCTION / "ca-bundle.yaml")
    dry_run_apply(ROOT / "examples" / "qwen3.6-27b.yaml", "ml-team")


def _module_dir(module: str, version: str) -> Path:
    result = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    info = json.loads(result.stdout or "{}")
    assert "Dir" in info, info.get("Error") or result.stderr
    return Path(info["Dir"])


def test_the_training_operator_overlay_builds_and_mounts_the_restricted_init_container(
    example_crds: Any, tmp_path: Path
) -> None:
    overlay = PRODUCTION / "training-operator"
    kustomization = (overlay / "kustomization.yaml").read_text()
    version = binaries.versions()["TRAINING_OPERATOR_VERSION"]
    remote = re.search(
        r"github\.com/kubeflow/training-operator\.git/(\S+)\?ref=(\S+)", kustomization
    )
    assert remote is not None and remote.group(2) == version, "the overlay installs what CI tests"
    # The remote base, from the module zip of the same version (no network to GitHub here).
    shutil.copytree(_module_dir("github.com/kubeflow/training-operator", version) / "manifests",
                    tmp_path / "manifests")  # fmt: skip
    local = tmp_path / "overlay"
    shutil.copytree(overlay, local)
    (local / "kustomization.yaml").write_text(
        kustomization.replace(remote.group(0), f"../{remote.group(1)}")
    )
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=True)

    built = example_crds.kubectl("kustomize", str(local))
    documents = [d for d in yaml.safe_load_all(built.stdout) if d]

    deployment = next(d for d in documents if d["kind"] == "Deployment")
    mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {
        "name": "pytorch-init-container",
        "mountPath": "/etc/config",
        "readOnly": True,
    } in mounts
    config_map = next(
        d for d in documents if d["metadata"]["name"].startswith("pytorch-init-container")
    )
    assert config_map["data"]["initContainer.yaml"] == (overlay / "initContainer.yaml").read_text()
