"""The chart renders, lints and validates: `helm lint` and `helm template` with default and
non-default values (charts/dflash-operator/ci/), every manifest accepted by the API server in
a server-side dry run, the operator pod admitted under Pod Security "restricted", and values
the schema refuses refused with a message that names the value."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev import third_party_crds
from dflash_dev.pytest_plugin import ClusterHandle
from dflash_operator.pools import parse_pools

# chart.py, loaded by path by conftest.py (tests are imported in importlib mode).
chart = sys.modules["dflash_chart_test_helpers"]
CHART = chart.CHART
CI_VALUES: list[Path] = chart.CI_VALUES

VALUE_SETS = [None, *CI_VALUES]
VALUE_IDS = ["defaults", *(p.stem for p in CI_VALUES)]


def values_args(values: Path | None, namespace: str) -> list[str]:
    """The values file; a single-namespace file watches the test's namespace (it must exist)."""
    if values is None:
        return []
    args = ["-f", str(values)]
    if yaml.safe_load(values.read_text()).get("operator", {}).get("watchNamespaces"):
        args += ["--set", f"operator.watchNamespaces={{{namespace}}}"]
    return args


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_helm_lint_passes_in_strict_mode(values: Path | None) -> None:
    args = ["-f", str(values)] if values else []
    result = chart.helm("lint", str(CHART), "--strict", *args)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout, result.stdout


# The prometheus-operator CRDs the chart's ServiceMonitor and PrometheusRule need.
MONITORING_CRDS = ("servicemonitors", "prometheusrules")


def install_monitoring_crds(cluster: ClusterHandle) -> None:
    """The pinned prometheus-operator's CRDs (hack/versions.env), left on the shared cluster:
    cluster-wide, and the same for every test."""
    for path in third_party_crds.ensure("prometheus-operator"):
        cluster.kubectl("apply", "--server-side", "--field-manager=chart-test", "-f", str(path))
    for plural in MONITORING_CRDS:
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            f"crd/{plural}.monitoring.coreos.com",
        )  # fmt: skip


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_every_rendered_manifest_passes_a_server_side_dry_run(
    values: Path | None, cluster: ClusterHandle, namespace: str
) -> None:
    manifests = chart.render(
        *values_args(values, namespace), name=chart.unique_release(), namespace=namespace
    )
    monitors = [m for m in manifests if m["kind"] == "ServiceMonitor"]
    for monitor in monitors:
        # What the monitor selects is the metrics Service and its port.
        service = chart.only(manifests, "Service")
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == [
            p["name"] for p in service["spec"]["ports"]
        ]
    if {"ServiceMonitor", "PrometheusRule"} & {m["kind"] for m in manifests}:
        install_monitoring_crds(cluster)
    result = cluster.kubectl(
        "apply", "--server-side", "--dry-run=server", "--field-manager=chart-test", "-f", "-",
        input=yaml.safe_dump_all(manifests), check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert result.stdout.count("(server dry run)") == len(manifests), result.stdout


@pytest.mark.parametrize("values", VALUE_SETS, ids=VALUE_IDS)
def test_the_rendered_pools_file_is_one_the_operator_accepts(values: Path | None) -> None:
    manifests = chart.render(*values_args(values, "team-a"))
    (config_map,) = [
        m
        for m in manifests
        if m["kind"] == "ConfigMap" and m["metadata"]["name"].endswith("-pools")
    ]
    pools = parse_pools(yaml.safe_load(config_map["data"]["pools.yaml"]), "rendered pools")
    assert set(pools.node_pools) >= {"b200", "cpu"}


def pod_of(deployment: dict[str, Any], namespace: str) -> dict[str, Any]:
    spec = copy.deepcopy(deployment["spec"]["template"]["spec"])
    spec["serviceAccountName"] = "default"  # the release's account is not installed here
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "operator-pss-check", "namespace": namespace},
        "spec": spec,
    }


def test_the_operator_pod_is_admitted_in_a_namespace_enforcing_pod_security_restricted(
    cluster: ClusterHandle, namespace: str
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    pod = pod_of(chart.only(chart.render(namespace=namespace), "Deployment"), namespace)
    admitted = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    assert admitted.returncode == 0, admitted.stderr

    # The check can fail: the same pod without the container's securityContext is refused.
    del pod["spec"]["containers"][0]["securityContext"]
    refused = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    assert refused.returncode != 0
    assert 'violates PodSecurity "restricted' in refused.stderr
    assert "allowPrivilegeEscalation != false" in refused.stderr


SCHEMA_ERROR = "values don't meet the specifications of the schema"
# (--set value, what the message must say): a mistyped or wrongly typed value of each section.
REFUSED_VALUES = [
    ("operator.watchNamespace={ml}", "at '/operator': additional properties 'watchNamespace' not allowed"),
    ("nodePools.b200.gpusPerNodes=8", "at '/nodePools/b200': additional properties 'gpusPerNodes' not allowed"),
    ("operator.workers=four", "at '/operator/workers': got string, want integer"),
    ("stageImages.pullPolicy=Sometimes", "at '/stageImages/pullPolicy'"),
    ("stageImage.regen.tag=0.2.0", "additional properties 'stageImage' not allowed"),
    ("nodePools.B200.gpusPerNode=1", "invalid propertyName 'B200'"),
    ("operator.watchNamespaces={Team_A}", "at '/operator/watchNamespaces/0'"),
    ("nodePools.cpu.tolerations[0].operator=Maybe", "at '/nodePools/cpu/tolerations/0/operator'"),
    ("metrics.serviceMonitor.interval=soon", "at '/metrics/serviceMonitor/interval'"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "message"), REFUSED_VALUES, ids=[v for v, _ in REFUSED_VALUES])
def test_a_mistyped_value_is_refused_by_the_schema_with_a_message_naming_it(
    value: str, message: str
) -> None:
    result = chart.helm("template", "x", str(CHART), "--set", value, check=False)
    assert result.returncode != 0
    assert SCHEMA_ERROR in result.stderr and message in result.stderr, result.stderr


def test_a_default_pool_that_is_not_configured_is_refused_with_the_configured_pools() -> None:
    result = chart.helm(
        "template", "x", str(CHART), "--set", "defaultPools.training=h100", check=False
    )
    assert result.returncode != 0
    assert (
        'defaultPools.training="h100" is not a key of nodePools; configured pools: '
        "b200, cpu, rtx-pro-6000"
    ) in result.stderr, result.stderr


def test_helm_install_with_a_mistyped_value_fails_and_installs_nothing(
    release: Any,
) -> None:
    result = release.install("--set", "operator.watchNamespace={ml}", check=False)
    assert result.returncode != 0
    assert "additional properties 'watchNamespace' not allowed" in result.stderr
    assert release.helm("status", release.name, check=False).returncode != 0
    assert release.owned([release.namespace]) == []
