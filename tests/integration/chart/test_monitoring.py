"""The chart's monitoring objects: the metrics Service on its own switch, the ServiceMonitor
that needs it, the PrometheusRule (`promtool check rules` and `promtool test rules` unit tests
of each alert, promtool built from the Go module proxy) and the Grafana dashboard; every metric
that an alert or a panel queries is one the operator exports (operator/dflash_operator/metrics.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dflash_dev import binaries
from dflash_operator import metrics
from prometheus_client import REGISTRY

# chart.py, loaded by path by conftest.py (tests are imported in importlib mode).
chart = sys.modules["dflash_chart_test_helpers"]
CHART = chart.CHART
DASHBOARD = CHART / "dashboards" / "dflash-operator.json"
RULE_TESTS = Path(__file__).with_name("data") / "alerts-test.yaml"
# Series Prometheus makes itself for every target.
SYNTHETIC = {"up"}
SAMPLE_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created", ""),
    "gauge": ("",),
    "info": ("_info",),
}
PROMQL_WORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
    "group_right", "inf", "nan", "Inf", "NaN",
}  # fmt: skip


def exported_metrics() -> set[str]:
    """Every sample name the operator's registry can expose: its own metrics (labelled ones
    included before their first sample) and the client library's process collectors."""
    metrics.register_run_phases(dict)
    metrics.register_run_gpu_hours(dict)
    metrics.register_training_likelihood(dict)
    names = set()
    for family in REGISTRY.collect():
        names |= {family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type]}
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label matchers,
    ranges, grouping clauses, offsets and numbers are removed, but functions and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', " ", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\boffset\s+-?[0-9a-z]+", " ", text)
    text = re.sub(r"(?<![A-Za-z_:])[0-9][0-9.]*([eE][-+]?[0-9]+)?", " ", text)
    found = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[match.end() :].lstrip().startswith("(") or match.group() in PROMQL_WORDS:
            continue  # a function, an aggregation or a keyword
        found.add(match.group())
    return found


def unknown_metrics(expressions: list[str]) -> dict[str, set[str]]:
    known = exported_metrics() | SYNTHETIC
    unknown = {e: metric_names(e) - known for e in expressions}
    return {e: names for e, names in unknown.items() if names}


def test_the_promql_name_check_finds_a_metric_the_operator_does_not_export() -> None:
    assert metric_names(
        "histogram_quantile(0.95, sum by (le) (rate(dflash_reconcile_duration_seconds_bucket"
        '{job="$job"}[$__rate_interval]))) > 1e3 and on (x) absent(up == 1) offset 5m'
    ) == {"dflash_reconcile_duration_seconds_bucket", "up"}
    assert unknown_metrics(["sum(rate(dflash_reconcile_errorz_total[5m])) > 0"]) == {
        "sum(rate(dflash_reconcile_errorz_total[5m])) > 0": {"dflash_reconcile_errorz_total"}
    }
    assert "dflash_runs" in exported_metrics()
    assert "dflash_reconciles_total" in exported_metrics()


# --- the Service and the ServiceMonitor ------------------------------------------------------
def kinds(*args: str) -> list[str]:
    return sorted(m["kind"] for m in chart.render(*args) if m["kind"] in MONITORING_KINDS)


MONITORING_KINDS = {"Service", "ServiceMonitor", "PrometheusRule", "ConfigMap"}


def test_the_metrics_service_is_rendered_without_a_service_monitor_and_not_without_metrics() -> (
    None
):
    assert "Service" in kinds()
    assert "ServiceMonitor" not in kinds()
    assert "Service" not in kinds("--set", "metrics.service.enabled=false")
    assert "Service" not in kinds("--set", "metrics.enabled=false")
    service = chart.only(
        chart.render("--set-string", "metrics.service.annotations.prometheus\\.io/scrape=true"),
        "Service",
    )
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}


def test_a_service_monitor_without_the_metrics_service_is_refused_with_a_message() -> None:
    result = chart.helm(
        "template", "x", str(CHART), "--set", "metrics.serviceMonitor.enabled=true",
        "--set", "metrics.service.enabled=false", check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert (
        "metrics.serviceMonitor.enabled=true needs metrics.service.enabled=true" in result.stderr
    ), result.stderr


# --- the PrometheusRule ----------------------------------------------------------------------
def rendered_rule(*args: str) -> dict[str, Any]:
    manifests = chart.render("--set", "metrics.prometheusRule.enabled=true", *args)
    return dict(chart.only(manifests, "PrometheusRule"))


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    (path,) = binaries.ensure_built(["promtool"]).values()
    return subprocess.run(
        [str(path), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )


def test_the_prometheus_rule_lists_the_operators_alerts_only_when_enabled() -> None:
    assert "PrometheusRule" not in kinds()
    rule = rendered_rule("--set", "metrics.prometheusRule.labels.release=kube-prometheus-stack")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == [
        "DFlashOperatorDown", "DFlashRunFailed", "DFlashAuditGateFailed", "DFlashRunStuck",
        "DFlashReconcileErrors",
    ]  # fmt: skip


def test_every_metric_an_alert_queries_is_one_the_operator_exports() -> None:
    rule = rendered_rule()
    expressions = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert unknown_metrics(expressions) == {}


def test_the_rules_pass_promtool_check_rules_and_the_alerts_unit_tests(tmp_path: Path) -> None:
    """data/alerts-test.yaml: series in, alerts out, for each alert (and a quiet case each)."""
    rule = rendered_rule("--set", "metrics.prometheusRule.phaseStuckFor=6h")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    checked = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout, checked.stdout
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            alert.pop("annotations")  # promtool compares them too; the labels are what matter
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    (tmp_path / "alerts-test.yaml").write_text(RULE_TESTS.read_text())
    tested = promtool("test", "rules", "alerts-test.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_fails_a_rule_that_is_not_promql(tmp_path: Path) -> None:
    """The check can fail: a broken expression is refused."""
    rule = rendered_rule()
    rule["spec"]["groups"][0]["rules"][0]["expr"] = "sum(up{job=}"
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    assert promtool("check", "rules", "rules.yaml", cwd=tmp_path).returncode != 0


# --- the Grafana dashboard -------------------------------------------------------------------
def panel_expressions(dashboard: dict[str, Any]) -> list[str]:
    panels = list(dashboard["panels"])
    for panel in list(panels):
        panels += panel.get("panels", [])  # rows
    return [t["expr"] for p in panels for t in p.get("targets", []) if t.get("expr")]


def test_the_dashboard_is_json_and_queries_only_metrics_the_operator_exports() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "dflash-operator" and dashboard["panels"]
    expressions = panel_expressions(dashboard)
    variables = [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    expressions += [re.sub(r"^label_values\((.*), *\w+\)$", r"\1", v) for v in variables]
    assert len(expressions) >= 10
    assert unknown_metrics(expressions) == {}
    every_metric = set().union(*(metric_names(e) for e in expressions))
    assert {"dflash_runs", "dflash_reconcile_errors_total", "dflash_gate_failures_total"} <= (
        every_metric
    )


def test_the_dashboard_configmap_carries_the_file_and_the_sidecars_label() -> None:
    manifests = chart.render("--set", "metrics.grafanaDashboard.enabled=true")
    config_map = chart.only(manifests, "ConfigMap", "dflash-operator-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["dflash-operator.json"]) == json.loads(
        DASHBOARD.read_text()
    )
    default = [m["metadata"]["name"] for m in chart.render() if m["kind"] == "ConfigMap"]
    assert default == ["dflash-operator-pools"]


@pytest.mark.parametrize("switch", ["prometheusRule", "serviceMonitor"])
def test_monitoring_objects_without_metrics_are_refused(switch: str) -> None:
    result = chart.helm(
        "template", "x", str(CHART), f"--set=metrics.{switch}.enabled=true",
        "--set=metrics.enabled=false", check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert f"metrics.{switch}.enabled=true needs metrics.enabled=true" in result.stderr
