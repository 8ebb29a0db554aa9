"""The chart's escape hatches, rendered with `helm template`: image digests, a ServiceAccount
the chart does not create, extra env and volumes, pod and container security contexts (and
OpenShift's restricted-v2, which assigns the UID), the readiness probe, and the metrics objects
(Service, ServiceMonitor, PrometheusRule, Grafana dashboard) each on its own switch."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

# chart.py, loaded by path by conftest.py (tests are imported in importlib mode).
chart = sys.modules["dflash_chart_test_helpers"]
CHART = chart.CHART
DIGEST = "sha256:" + "0123456789abcdef" * 4


def deployment(*args: str) -> dict[str, Any]:
    return dict(chart.only(chart.render(*args), "Deployment"))


def container(*args: str) -> dict[str, Any]:
    (operator,) = deployment(*args)["spec"]["template"]["spec"]["containers"]
    return dict(operator)


def env_of(operator: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in operator["env"]}


def refused(*args: str) -> str:
    result = chart.helm("template", "x", str(CHART), *args, check=False)
    assert result.returncode != 0, result.stdout[:500]
    return str(result.stderr)


# --- image digests ---------------------------------------------------------------------------
def test_images_render_repository_colon_tag_when_no_digest_is_set() -> None:
    operator = container("--set", "image.tag=v9")
    assert operator["image"] == "ghcr.io/dflash-dev/dflash-operator:v9"
    assert env_of(operator)["DFLASH_TRAINER_IMAGE"] == "ghcr.io/dflash-dev/dflash-trainer:0.1.0"


def test_a_digest_renders_repository_at_digest_and_the_tag_is_ignored() -> None:
    operator = container(
        "--set", "image.tag=v9", "--set", f"image.digest={DIGEST}",
        "--set", f"stageImages.regen.digest={DIGEST}",
        "--set", "stageImages.trainer.tag=v9", "--set", f"stageImages.trainer.digest={DIGEST}",
    )  # fmt: skip
    assert operator["image"] == f"ghcr.io/dflash-dev/dflash-operator@{DIGEST}"
    env = env_of(operator)
    assert env["DFLASH_REGEN_IMAGE"] == f"ghcr.io/dflash-dev/dflash-regen@{DIGEST}"
    assert env["DFLASH_TRAINER_IMAGE"] == f"ghcr.io/dflash-dev/dflash-trainer@{DIGEST}"


def test_a_digest_that_is_not_one_is_refused_by_the_schema() -> None:
    assert "at '/image/digest'" in refused("--set", "image.digest=latest")
    assert "at '/stageImages/trainer/digest'" in refused("--set", "stageImages.trainer.digest=v1")


# --- the ServiceAccount ----------------------------------------------------------------------
def subjects(manifests: list[dict[str, Any]]) -> list[str]:
    """The account every binding of the chart grants its role to."""
    return [
        s["name"]
        for m in manifests
        if m["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in m["subjects"]
    ]


@pytest.mark.parametrize("mode", ["cluster-wide", "single-namespace"])
def test_without_service_account_create_every_binding_and_the_policy_name_the_given_account(
    mode: str,
) -> None:
    args = ["--set", "serviceAccount.create=false", "--set", "serviceAccount.name=platform-ops"]
    if mode == "single-namespace":
        args += ["--set", "operator.watchNamespaces={team-a}"]
    manifests = chart.render(*args)
    assert not [m for m in manifests if m["kind"] == "ServiceAccount"]
    assert subjects(manifests) and set(subjects(manifests)) == {"platform-ops"}
    spec = chart.only(manifests, "Deployment")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "platform-ops"
    policy = chart.only(manifests, "ValidatingAdmissionPolicy", "dflash-operator-operator-writes")
    (condition,) = policy["spec"]["matchConditions"]
    assert "'system:serviceaccount:dflash-system:platform-ops'" in condition["expression"]


def test_a_created_service_account_may_be_named_and_is_the_one_bound() -> None:
    manifests = chart.render("--set", "serviceAccount.name=ops")
    assert chart.only(manifests, "ServiceAccount")["metadata"]["name"] == "ops"
    assert set(subjects(manifests)) == {"ops"}


def test_without_service_account_create_a_name_is_required() -> None:
    message = refused("--set", "serviceAccount.create=false")
    assert "serviceAccount.create=false needs serviceAccount.name" in message


def test_the_operators_account_may_not_be_named_like_a_runs_trainer_account() -> None:
    assert "at '/serviceAccount/name'" in refused("--set", "serviceAccount.name=ops-trainer")


# --- extra env and volumes -------------------------------------------------------------------
def test_extra_env_and_volumes_are_added_after_the_charts_own() -> None:
    values = CHART / "ci" / "namespaced-values.yaml"
    spec = deployment("-f", str(values))["spec"]["template"]["spec"]
    (operator,) = spec["containers"]
    names = [e["name"] for e in operator["env"]]
    assert names[0] == "DFLASH_POOLS_FILE" and names[-2:] == ["HTTPS_PROXY", "NODE_NAME"]
    assert operator["env"][-1]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert [v["name"] for v in spec["volumes"]] == ["pools", "tmp", "ca-bundle"]
    assert spec["volumes"][-1]["configMap"] == {"name": "corporate-ca", "optional": True}
    assert operator["volumeMounts"][-1] == {
        "name": "ca-bundle", "mountPath": "/etc/ssl/custom", "readOnly": True,
    }  # fmt: skip


def test_no_extra_env_or_volumes_by_default() -> None:
    spec = deployment()["spec"]["template"]["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["pools", "tmp"]


def test_an_extra_volume_may_not_take_the_name_of_one_of_the_charts_own() -> None:
    message = refused("--set", "extraVolumes[0].name=tmp", "--set", "extraVolumes[0].emptyDir=null")
    assert "at '/extraVolumes/0/name'" in message


# --- security contexts -----------------------------------------------------------------------
OPENSHIFT = [
    "--set",
    "podSecurityContext.runAsUser=null",
    "--set",
    "podSecurityContext.runAsGroup=null",
]


def test_the_default_security_contexts_are_pod_security_restricted_with_the_images_user() -> None:
    spec = deployment()["spec"]["template"]["spec"]
    assert spec["securityContext"] == {
        "runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip
    assert spec["containers"][0]["securityContext"] == {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    }  # fmt: skip


def test_a_null_uid_and_gid_leave_them_to_the_platform_and_run_as_non_root_stays() -> None:
    """OpenShift's restricted-v2 assigns a UID from the namespace's range and refuses a fixed
    one; runAsNonRoot must stay, even when set to null too."""
    spec = deployment(*OPENSHIFT, "--set", "podSecurityContext.runAsNonRoot=null")
    pod = spec["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"]["runAsNonRoot"] is True
    assert "runAsUser" not in pod["containers"][0]["securityContext"]


def test_the_security_contexts_take_other_settings_and_refuse_running_as_root_allowed() -> None:
    pod = deployment(
        "--set", "podSecurityContext.fsGroup=2000",
        "--set", "securityContext.capabilities.add={NET_BIND_SERVICE}",
    )["spec"]["template"]["spec"]  # fmt: skip
    assert pod["securityContext"]["fsGroup"] == 2000
    assert pod["containers"][0]["securityContext"]["capabilities"] == {
        "add": ["NET_BIND_SERVICE"], "drop": ["ALL"],
    }  # fmt: skip
    assert "at '/podSecurityContext/runAsNonRoot'" in refused(
        "--set", "podSecurityContext.runAsNonRoot=false"
    )
    assert "additional properties 'privileged' not allowed" in refused(
        "--set", "securityContext.privileged=true"
    )


def test_the_pod_without_a_fixed_uid_is_still_admitted_under_pod_security_restricted(
    cluster: Any, namespace: str
) -> None:
    cluster.kubectl(
        "label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    spec = deployment(*OPENSHIFT)["spec"]["template"]["spec"]
    spec["serviceAccountName"] = "default"  # the release's account is not installed here
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "operator-openshift-check", "namespace": namespace}, "spec": spec,
    }  # fmt: skip
    admitted = cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False
    )
    assert admitted.returncode == 0, admitted.stderr


# --- the readiness probe ---------------------------------------------------------------------
def test_the_readiness_probe_asks_readyz_on_its_own_port() -> None:
    operator = container("--set", "readinessPort=9191")
    assert operator["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ready"}
    ports = {p["name"]: p["containerPort"] for p in operator["ports"]}
    assert ports["ready"] == 9191 and ports["health"] == 8080
    assert env_of(operator)["DFLASH_READINESS_PORT"] == "9191"
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_ports_that_collide_are_refused_with_the_ports() -> None:
    message = refused("--set", "readinessPort=8080")
    assert "healthPort, readinessPort and metrics.port must differ, got 8080, 8080, 9090" in message
