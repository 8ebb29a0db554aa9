"""`helm install`, `helm upgrade` and `helm uninstall` of the chart on the real control plane:
the operator, running with the release's ServiceAccount, RBAC, pools and settings, takes the
example run to Succeeded in either mode; an upgrade's pools reach the operator; uninstalling
leaves only the CRD and the runs."""

from __future__ import annotations

import json
import sys
from typing import Any

from dflash_dev.kube_wait import get_json, wait_for
from dflash_dev.version import read_version

# chart.py, loaded by path by conftest.py (tests are imported in importlib mode).
chart = sys.modules["dflash_chart_test_helpers"]
CRD = "dflashruns.dflash.dev"
# A pool an upgrade adds: no node has its label, so its pods wait Pending and take no capacity
# of the fake nodes other tests share.
UPGRADED_POOL = {
    "nodeSelector": {"dflash.dev/node-pool": "chart-upgrade-none"},
    "gpusPerNode": 8,
    "labels": {"kueue.x-k8s.io/queue-name": "upgraded"},
}


def test_helm_install_gives_an_operator_with_the_charts_account_what_it_needs_to_finish_the_example_run(
    release: Any,
) -> None:
    release.install()
    env = release.operator_env()
    assert env["DFLASH_NAMESPACES"] == ""
    # An empty stageImages tag is the chart's appVersion, the repository's VERSION.
    assert env["DFLASH_REGEN_IMAGE"] == f"ghcr.io/dflash-dev/dflash-regen:{read_version()}"
    harness = release.harness()
    release.start_operator(harness)
    harness.apply_run("r1", chart.tiny_cpu_run())

    status = chart.drive_to_success(harness)
    # The chart's default launcher (auto) on a cluster serving Trainer v2: a TrainJob, admitted
    # by the real Trainer webhook and run through JobSet.
    assert status["launcher"] == "trainjob"
    chart.restart_safety.assert_one_child_per_stage(harness)
    recorded = {(c["kind"], c["name"]) for c in status["children"]}
    assert {("ServiceAccount", "r1-trainer"), ("Role", "r1-trainer")} <= recorded
    regen = get_json(harness.cluster, "job", "r1-regen", "-n", harness.namespace)
    (container,) = regen["spec"]["template"]["spec"]["containers"]
    assert container["image"] == env["DFLASH_REGEN_IMAGE"]
    assert not [e for e in harness.events("r1") if e[0] == "Warning"]


def test_single_namespace_mode_runs_the_example_with_only_a_role_in_the_watched_namespace(
    release: Any,
) -> None:
    release.install("--set", f"operator.watchNamespaces={{{release.namespace}}}")
    assert release.operator_env()["DFLASH_NAMESPACES"] == release.namespace
    # Cluster-wide, only the read-only discovery binding (CRDs and namespaces, for kopf).
    bindings = [o for o in release.owned([release.namespace]) if "clusterrolebinding" in o]
    assert bindings == [f"clusterrolebindings.rbac.authorization.k8s.io/{release.name}-discovery"]
    role = release.get("role", release.name)
    assert {r["resources"][0] for r in role["rules"]} >= {"dflashruns", "jobs", "pytorchjobs"}
    harness = release.harness()
    release.start_operator(harness)
    harness.apply_run("r1", chart.tiny_cpu_run())

    chart.drive_to_success(harness)
    chart.restart_safety.assert_one_child_per_stage(harness)


def test_helm_upgrade_with_a_changed_pool_reaches_the_operator(release: Any) -> None:
    release.install()
    before = release.deployment()["spec"]["template"]["metadata"]["annotations"]["checksum/pools"]
    harness = release.harness()
    release.start_operator(harness)
    spec = chart.operator_harness.base_spec(
        regeneration={"shards": 1, "nodePool": "upgraded", "canary": {"samplesPerSource": 0}}
    )
    harness.apply_run("early", spec)
    failed = harness.wait_phase("early", "Failed")
    assert "upgraded" in failed["message"]

    release.upgrade("--set-json", f"nodePools.upgraded={json.dumps(UPGRADED_POOL)}")
    after = release.deployment()["spec"]["template"]["metadata"]["annotations"]["checksum/pools"]
    assert after != before, "the pod template must change, so that the operator restarts"
    assert release.pools()["nodePools"]["upgraded"]["gpusPerNode"] == 8
    # What the Deployment does on a new pod template (strategy Recreate): stop, start anew.
    harness.stop_operators()
    harness.pools = chart.held(release.pools())
    release.start_operator(harness)
    # The pool's label names a Kueue LocalQueue; the operator waits until it exists.
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "upgraded", "namespace": harness.namespace},
             "spec": {"clusterQueue": "chart-upgrade-none"}}  # fmt: skip
    harness.cluster.kubectl("apply", "-f", "-", input=json.dumps(queue))
    harness.apply_run("late", spec)

    harness.wait_phase("late", "Regenerating")
    job = get_json(harness.cluster, "job", "late-regen", "-n", harness.namespace)
    template = job["spec"]["template"]
    assert template["spec"]["nodeSelector"] == UPGRADED_POOL["nodeSelector"]
    assert template["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "upgraded"


def test_helm_uninstall_removes_everything_but_the_crd_and_the_runs(
    release: Any, other_namespace: str
) -> None:
    release.install("--set", f"operator.watchNamespaces={{{release.namespace},{other_namespace}}}")
    namespaces = [release.namespace, other_namespace]
    owned = release.owned(namespaces)
    for kind in ("serviceaccounts", "configmaps", "deployments.apps", "roles", "rolebindings"):
        assert any(o.startswith(kind) for o in owned), (kind, owned)
    assert any(o.endswith(f"/{release.name}-dflashrun-editor") for o in owned), owned
    harness = release.harness()
    harness.apply_run("kept", chart.tiny_cpu_run())

    release.uninstall()
    wait_for(
        "every object of the release to go",
        lambda: release.owned(namespaces) == [],
        60,
    )
    assert release.cluster.kubectl("get", "crd", CRD, check=False).returncode == 0
    assert harness.run("kept")["metadata"]["name"] == "kept"


def test_helm_install_with_skip_crds_into_a_restricted_namespace_creates_the_operator_pod(
    release: Any,
) -> None:
    """Pod Security `restricted` enforced on the release namespace, the CRD left to another
    install (--skip-crds, as GitOps setups do): the chart installs, and the Deployment's pod is
    admitted (a refused pod would leave the ReplicaSet with a FailedCreate and no pod)."""
    release.cluster.kubectl(
        "label", "namespace", release.namespace,
        "pod-security.kubernetes.io/enforce=restricted", "--overwrite",
    )  # fmt: skip
    release.install("--skip-crds")
    selector = release.deployment()["spec"]["selector"]["matchLabels"]
    labels = ",".join(f"{k}={v}" for k, v in selector.items())

    def pods() -> list[Any]:
        found = get_json(release.cluster, "pods", "-n", release.namespace, "-l", labels)
        return list(found["items"])

    created = wait_for("the operator pod", pods, 60)
    assert created[0]["spec"]["securityContext"]["runAsNonRoot"] is True
    events = get_json(release.cluster, "events", "-n", release.namespace)["items"]
    assert not [e for e in events if e.get("reason") == "FailedCreate"], events
