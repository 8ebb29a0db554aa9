"""helm, built from the Go module proxy, works against the local control plane."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from dflash_dev import binaries
from dflash_dev.pytest_plugin import ClusterHandle


def helm(*args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(binaries.cached_path("helm")), *args]
    if kubeconfig:
        argv.append(f"--kubeconfig={kubeconfig}")
    return subprocess.run(argv, capture_output=True, text=True, check=True)


def test_helm_reports_its_pinned_version() -> None:
    out = helm("version", "--short").stdout
    assert out.startswith(binaries.version_of("helm"))


def test_helm_template_renders_a_trivial_chart_against_the_server_version(
    cluster: ClusterHandle, tmp_path: Path
) -> None:
    chart = tmp_path / "trivial"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        yaml.safe_dump(
            {"apiVersion": "v2", "name": "trivial", "version": "0.1.0", "kubeVersion": ">=1.36.0-0"}
        )
    )
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n"
    )
    rendered = helm(
        "template",
        "demo",
        str(chart),
        "--validate",
        "--set",
        "greeting=hi",
        kubeconfig=cluster.kubeconfig,
    ).stdout
    (manifest,) = [d for d in yaml.safe_load_all(rendered) if d]
    assert manifest["metadata"]["name"] == "demo"
    assert manifest["data"]["greeting"] == "hi"
