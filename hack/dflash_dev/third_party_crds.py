"""CRDs of the tools the examples and the chart target (Argo CD, External Secrets, Sealed Secrets,
prometheus-operator), copied from their Go module zips on the module proxy and cached by
version, so that tests apply the examples' manifests and the chart's ServiceMonitor and
PrometheusRule to the local API server against the real schemas. No controller of these
tools runs: the API server only validates and stores the objects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .binaries import versions
from .errors import DevError
from .paths import cache_root


@dataclass(frozen=True)
class CrdSource:
    module: str
    version_key: str  # in hack/versions.env
    files: tuple[str, ...]  # paths inside the module zip
    # The Go toolchain `go mod download` needs (a versions.env key), when the module's go.mod
    # declares a newer Go than the local one: Argo CD v3.6 declares 1.27.
    toolchain_key: str | None = None


SOURCES = {
    "argo-cd": CrdSource(
        "github.com/argoproj/argo-cd/v3",
        "ARGOCD_VERSION",
        ("manifests/crds/application-crd.yaml", "manifests/crds/appproject-crd.yaml"),
        toolchain_key="ARGOCD_GOTOOLCHAIN",
    ),
    "external-secrets": CrdSource(
        "github.com/external-secrets/external-secrets",
        "EXTERNAL_SECRETS_VERSION",
        (
            "config/crds/bases/external-secrets.io_externalsecrets.yaml",
            "config/crds/bases/external-secrets.io_secretstores.yaml",
            "config/crds/bases/external-secrets.io_clustersecretstores.yaml",
        ),
    ),
    "sealed-secrets": CrdSource(
        "github.com/bitnami-labs/sealed-secrets",
        "SEALED_SECRETS_VERSION",
        ("helm/sealed-secrets/crds/bitnami.com_sealedsecrets.yaml",),
    ),
    # Kubeflow Trainer v2: the TrainJob the operator renders and the ClusterTrainingRuntime the
    # chart ships are checked against these schemas (tests/unit/operator/test_trainjob.py).
    "kubeflow-trainer": CrdSource(
        "github.com/kubeflow/trainer/v2",
        "TRAINER_VERSION",
        (
            "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
            "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
        ),
    ),
    "prometheus-operator": CrdSource(
        "github.com/prometheus-operator/prometheus-operator",
        "PROMETHEUS_OPERATOR_VERSION",
        (
            "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
            "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
        ),
    ),
}


def crd_dir(name: str) -> Path:
    source = SOURCES[name]
    return cache_root() / "share" / "crds" / f"{name}-{versions()[source.version_key]}"


def ensure(name: str) -> list[Path]:
    """The CRD files of one tool, fetched with `go mod download` the first time."""
    source = SOURCES[name]
    target = crd_dir(name)
    files = [target / Path(f).name for f in source.files]
    if all(f.exists() for f in files):
        return files
    version = versions()[source.version_key]
    env = {**os.environ, "GOFLAGS": ""}
    if source.toolchain_key is not None:
        env["GOTOOLCHAIN"] = versions()[source.toolchain_key]
    go = shutil.which("go")
    if go is None:
        raise DevError(f"go is needed once to fetch the {name} {version} CRDs; install Go >= 1.26")
    result = subprocess.run(
        [go, "mod", "download", "-json", f"{source.module}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise DevError(
            f"could not fetch {source.module}@{version} from the Go module proxy: "
            f"{info.get('Error') or result.stderr.strip()}"
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for relative in source.files:
        shutil.copyfile(Path(info["Dir"]) / relative, partial / Path(relative).name)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return files


# Installed for the examples: not the Trainer's, whose served TrainJob API would make
# `launcher: auto` pick TrainJob on a cluster that runs no Trainer controller.
EXAMPLE_TOOLS = ("argo-cd", "external-secrets", "sealed-secrets", "prometheus-operator")


def ensure_all() -> list[Path]:
    return [path for name in EXAMPLE_TOOLS for path in ensure(name)]
