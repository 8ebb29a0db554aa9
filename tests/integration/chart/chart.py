"""Helpers of the chart tests: real helm, a release of the chart under a unique name (its
ClusterRoles are cluster-wide and the cluster is shared), and the operator as a local process
with the release's ServiceAccount token and the pools and settings the release installed,
through the operator tests' harness (tests/integration/operator/conftest.py), reused rather
than copied. Loaded by path (`load_chart_helpers()` in conftest.py): tests have no packages.
"""

from __future__ import annotations

import importlib.util
import json
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from dflash_dev import binaries, operator_local
from dflash_dev.kube_wait import get_json
from dflash_dev.pytest_plugin import ClusterHandle

TESTS = Path(__file__).parents[2]
CHART = operator_local.CHART
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
# Settings that only make sense inside the pod: the harness sets its own (a local pools file,
# free loopback ports, a fast resync, readable logs).
POD_ONLY_ENV = {
    "DFLASH_POOLS_FILE",
    "DFLASH_METRICS_PORT",
    "DFLASH_HEALTH_PORT",
    "DFLASH_READINESS_PORT",
    "DFLASH_RESYNC_SECONDS",
    "DFLASH_LOG_FORMAT",
}
# What a release may own in its namespaces and cluster-wide (uninstall must leave none).
NAMESPACED_KINDS = (
    "serviceaccounts", "configmaps", "deployments.apps", "services", "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io", "pods",
)  # fmt: skip
CLUSTER_KINDS = (
    "clusterroles.rbac.authorization.k8s.io",
    "clusterrolebindings.rbac.authorization.k8s.io",
)


def load_test_module(relative: str, name: str) -> ModuleType:
    """Import a test helper module by path (tests have no packages; pytest uses importlib)."""
    spec = importlib.util.spec_from_file_location(name, TESTS / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


operator_harness = load_test_module("integration/operator/conftest.py", "chart_operator_harness")
restart_safety = load_test_module(
    "integration/operator/test_restart_safety.py", "chart_operator_restart_safety"
)


def helm(
    *args: str, kubeconfig: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    argv = [str(binaries.cached_path("helm")), *args]
    if kubeconfig is not None:
        argv.append(f"--kubeconfig={kubeconfig}")
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=180)
    if check and result.returncode != 0:
        raise AssertionError(
            f"helm {' '.join(args[:2])} exited {result.returncode}:\n{result.stderr}"
        )
    return result


def render(
    *args: str, name: str = "dflash-operator", namespace: str = "dflash-system"
) -> list[dict[str, Any]]:
    """`helm template` of the chart: its manifests, as dicts."""
    out = helm("template", name, str(CHART), "-n", namespace, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def only(manifests: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    assert len(found) == 1, (
        f"expected one {kind} {name or ''}, got {[m['metadata']['name'] for m in found]}"
    )
    return found[0]


def unique_release() -> str:
    return f"dfo-{secrets.token_hex(3)}"


@dataclass
class Release:
    """One installed release of the chart, and the operator it would run."""

    cluster: ClusterHandle
    name: str
    namespace: str
    workdir: Path
    installed: bool = False
    harnesses: list[Any] = field(default_factory=list)
    # serviceAccount.name of the install; empty: the chart's default, the release name.
    service_account: str = ""

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return helm(*args, "-n", self.namespace, kubeconfig=self.cluster.kubeconfig, check=check)

    def install(self, *values: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # Helm 4 server-side-applies crds/ at install. On the shared cluster the operator tests
        # apply the same CRD under their own field manager, from a working tree other engineers
        # change concurrently: a description edited in between would be a conflict.
        result = self.helm(
            "install", self.name, str(CHART), "--force-conflicts", *values, check=check
        )
        self.installed = self.installed or result.returncode == 0
        return result

    def upgrade(self, *values: str) -> subprocess.CompletedProcess[str]:
        return self.helm("upgrade", self.name, str(CHART), *values)

    def uninstall(self) -> None:
        if self.installed:
            self.helm("uninstall", self.name, "--wait", "--timeout=120s")
            self.installed = False

    # --- what the release installed ---------------------------------------------------------
    @property
    def account(self) -> str:
        return self.service_account or self.name

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return dict(get_json(self.cluster, kind, name, "-n", namespace or self.namespace))

    def pools(self) -> dict[str, Any]:
        """The pools file, as the pod would read it from the mounted ConfigMap."""
        config_map = self.get("configmap", f"{self.name}-pools")
        return dict(yaml.safe_load(config_map["data"]["pools.yaml"]))

    def deployment(self) -> dict[str, Any]:
        return self.get("deployment", self.name)

    def operator_env(self) -> dict[str, str]:
        """The DFLASH_* settings the Deployment gives the operator container."""
        (container,) = self.deployment()["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"]}  # "" is dropped

    def owned(self, namespaces: list[str]) -> list[str]:
        """Every object labelled as this release's, in `namespaces` and cluster-wide."""
        selector = f"app.kubernetes.io/instance={self.name}"
        found = []
        for namespace in namespaces:
            for kind in NAMESPACED_KINDS:
                items = get_json(self.cluster, kind, "-n", namespace, "-l", selector)["items"]
                found += [f"{kind}/{namespace}/{i['metadata']['name']}" for i in items]
        for kind in CLUSTER_KINDS:
            items = get_json(self.cluster, kind, "-l", selector)["items"]
            found += [f"{kind}/{i['metadata']['name']}" for i in items]
        return found

    # --- the operator, as the Deployment would run it ---------------------------------------
    def harness(self, runs_namespace: str | None = None) -> Any:
        """The operator tests' harness, with this release's token, pools and settings; its pools
        hold stage pods Running (kwok) so the test plays the kubelet."""
        kubeconfig = operator_local.token_kubeconfig(
            self.cluster.kubeconfig,
            self.workdir / f"{self.name}.kubeconfig",
            account=self.account,
            namespace=self.namespace,
            duration="1h",
        )
        harness = operator_harness.Harness(
            self.cluster,
            runs_namespace or self.namespace,
            self.workdir,
            kubeconfig,
            pools=held(self.pools()),
        )
        # The example run has a canary: the kubelet's part covers its two stages too.
        harness.stage_phases = {**operator_harness.CANARY_PHASES, **harness.stage_phases}
        self.harnesses.append(harness)
        return harness

    def start_operator(self, harness: Any) -> Any:
        env = {k: v for k, v in self.operator_env().items() if k not in POD_ONLY_ENV}
        # The downward API's values (fieldRef), as the kubelet would fill them in: leader
        # election takes the release's Lease in the release's namespace, with its RBAC.
        if "POD_NAMESPACE" in env:
            env["POD_NAMESPACE"] = self.namespace
            env["POD_NAME"] = f"{self.name}-{len(harness.operators)}"
        watched = env.pop("DFLASH_NAMESPACES")
        # On the shared cluster a cluster-wide operator would act on other tests' runs: it
        # watches only the test's namespace (the RBAC is still the cluster-wide ClusterRole).
        assert watched in ("", harness.namespace), watched
        return harness.start_operator(env=env)


def held(pools: dict[str, Any]) -> dict[str, Any]:
    for pool in pools["nodePools"].values():
        pool["labels"] = {**(pool.get("labels") or {}), **operator_harness.HOLD}
    return pools


def tiny_cpu_run() -> dict[str, Any]:
    """The demo run of examples/tiny-cpu.yaml: CPU pool only, so no fake GPU is taken."""
    body = yaml.safe_load((TESTS.parent / "examples" / "tiny-cpu.yaml").read_text())
    return dict(body["spec"])


def drive_to_success(harness: Any, timeout: float = 120.0) -> dict[str, Any]:
    """Play the kubelet for run r1 (the operator tests' `drive`) until it succeeds."""
    deadline = time.monotonic() + timeout
    while (status := harness.status("r1")).get("phase") != "Succeeded":
        assert time.monotonic() < deadline, (
            f"r1 did not succeed: {json.dumps(status)[:2000]}\n{harness.operator.log_tail()}"
        )
        assert status.get("phase") not in ("Failed", "AuditFailed"), json.dumps(status)[:2000]
        restart_safety.drive(harness)
        time.sleep(0.3)
    return status
