"""The operator's ServiceAccount, as the chart installs it, may do exactly what the operator
does and nothing else (`kubectl auth can-i --as=...`): no Secrets, nothing outside its list, no
escalation beyond what it holds, and in single-namespace mode nothing outside its namespaces.
The user roles give ML users runs and nothing more."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from dflash_dev import binaries, operator_local
from dflash_dev.kube_wait import wait_for

# chart.py, loaded by path by conftest.py (tests are imported in importlib mode).
chart = sys.modules["dflash_chart_test_helpers"]
# What the operator's code calls (runtime/kube.py, handlers/, children/rbac.py): resource ->
# verbs. The chart's rules must give exactly this.
OPERATOR_RIGHTS = {
    "dflashruns.dflash.dev": {"get", "list", "watch", "patch"},
    "dflashruns.dflash.dev/status": {"get", "patch"},
    "dflashruns.dflash.dev/finalizers": {"update"},
    "jobs.batch": {"get", "list", "watch", "create", "patch", "delete"},
    "pytorchjobs.kubeflow.org": {"get", "list", "watch", "create", "patch", "delete"},
    "trainjobs.trainer.kubeflow.org": {"get", "list", "watch", "create", "patch", "delete"},
    # A TrainJob's pods name their JobSet: JobSets are watched, never written.
    "jobsets.jobset.x-k8s.io": {"list", "watch"},
    "pods": {"list", "watch"},
    "workloads.kueue.x-k8s.io": {"list", "patch"},
    # Objects a run names, looked up by name before its child is created (plan/references.py).
    "localqueues.kueue.x-k8s.io": {"get"},
    "priorityclasses.scheduling.k8s.io": {"get"},
    "clustertrainingruntimes.trainer.kubeflow.org": {"get"},
    "configmaps": {"get", "list", "watch", "create", "update"},
    "serviceaccounts": {"get", "create"},
    "roles.rbac.authorization.k8s.io": {"get", "create"},
    "rolebindings.rbac.authorization.k8s.io": {"get", "create"},
    # events: list reads the kubelet's FailedMount events of a pod waiting in ContainerCreating.
    "events": {"list", "create", "patch"},
    # kopf follows CRDs (the PyTorchJob watch starts when its CRD appears, no restart) and
    # namespaces (one watched by name that is created later).
    "customresourcedefinitions.apiextensions.k8s.io": {"list", "watch"},
    "namespaces": {"list", "watch"},
}
# Single-namespace mode's only cluster-wide rights (read-only): CRDs, and the namespaces kopf
# follows.
DISCOVERY_RIGHTS = {
    "customresourcedefinitions.apiextensions.k8s.io": {"list", "watch"},
    "namespaces": {"list", "watch"},
    "priorityclasses.scheduling.k8s.io": {"get"},
    "clustertrainingruntimes.trainer.kubeflow.org": {"get"},
}


# Leader election, in the release namespace only: create a Lease, then get/update only its own
# (named after the release, whichever account the operator runs as).
def leader_rights(release: Any) -> dict[str, set[str]]:
    return {
        "leases.coordination.k8s.io": {"create"},
        f"leases.coordination.k8s.io[{release.name}]": {"get", "update"},
    }


# Every authenticated user may ask what it may do (system:basic-user).
SELF_REVIEWS = {
    "selfsubjectreviews.authentication.k8s.io",
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
}
# (verb, resource[, subresource]) the operator never needs: each must be refused.
REFUSED = [
    ("get", "secrets"), ("list", "secrets"), ("watch", "secrets"), ("create", "secrets"),
    ("get", "pods"), ("create", "pods"), ("delete", "pods"), ("get", "pods", "log"),
    ("create", "pods", "exec"), ("delete", "configmaps"), ("patch", "configmaps"),
    ("update", "dflashruns.dflash.dev"), ("delete", "dflashruns.dflash.dev"),
    ("create", "dflashruns.dflash.dev"), ("update", "jobs.batch"), ("delete", "serviceaccounts"),
    ("create", "serviceaccounts", "token"), ("delete", "roles.rbac.authorization.k8s.io"),
    ("escalate", "roles.rbac.authorization.k8s.io"), ("bind", "roles.rbac.authorization.k8s.io"),
    ("create", "clusterroles.rbac.authorization.k8s.io"), ("create", "deployments.apps"),
    ("create", "persistentvolumeclaims"), ("list", "nodes"), ("create", "namespaces"),
    ("get", "leases.coordination.k8s.io"), ("create", "workloads.kueue.x-k8s.io"),
    ("delete", "workloads.kueue.x-k8s.io"), ("update", "clusterqueues.kueue.x-k8s.io"),
    ("get", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("delete", "customresourcedefinitions.apiextensions.k8s.io"), ("delete", "namespaces"),
    ("list", "priorityclasses.scheduling.k8s.io"), ("create", "priorityclasses.scheduling.k8s.io"),
    ("list", "localqueues.kueue.x-k8s.io"), ("create", "localqueues.kueue.x-k8s.io"),
    ("*", "*"),
]  # fmt: skip


def can_i(release: Any, verb: str, resource: str, *extra: str, as_user: str | None = None) -> bool:
    result = release.cluster.kubectl(
        "auth", "can-i", verb, resource, f"--as={as_user or release.user}", *extra, check=False
    )
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), result.stderr
    return answer == "yes"


def rights(release: Any, namespace: str) -> dict[str, set[str]]:
    """`kubectl auth can-i --list` of the account in `namespace`: resource -> verbs (rules
    limited to named objects as `resource[name]`)."""
    table = release.cluster.kubectl(
        "auth", "can-i", "--list", f"--as={release.user}", "-n", namespace
    ).stdout.splitlines()[1:]
    found: dict[str, set[str]] = {}
    for line in table:
        resource, non_resource, names, verbs = line.split(None, 3) if line[0] != " " else [""] * 4
        if resource and resource not in SELF_REVIEWS:
            assert non_resource == "[]", line
            key = resource if names == "[]" else f"{resource}{names}"
            found.setdefault(key, set()).update(verbs.strip("[]").split())
    return found


def as_operator(
    release: Any, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    kubeconfig = operator_local.token_kubeconfig(
        release.cluster.kubeconfig,
        release.workdir / "operator.kubeconfig",
        account=release.account,
        namespace=release.namespace,
        duration="1h",
    )
    argv = [str(binaries.cached_path("kubectl")), f"--kubeconfig={kubeconfig}", *args]
    return subprocess.run(
        argv, input=input, capture_output=True, text=True, check=False, timeout=60
    )


def test_the_operators_account_holds_exactly_the_rights_its_code_uses(release: Any) -> None:
    release.install()
    assert rights(release, release.namespace) == OPERATOR_RIGHTS | leader_rights(release)
    assert rights(release, "default") == OPERATOR_RIGHTS  # cluster-wide mode
    assert can_i(release, "list", "jobs.batch", "--all-namespaces")
    assert can_i(release, "patch", "dflashruns.dflash.dev", "--subresource=status", "-n", "x")


def test_the_operators_account_is_refused_what_the_operator_never_does(release: Any) -> None:
    release.install()
    allowed = []
    for verb, resource, *sub in REFUSED:
        extra = [f"--subresource={sub[0]}"] if sub else []
        for where in (["-n", release.namespace], ["--all-namespaces"]):
            if can_i(release, verb, resource, *where, *extra):
                allowed.append((verb, resource, *sub, *where))
    assert allowed == []


def test_the_operator_can_grant_the_trainers_role_but_nothing_it_does_not_hold(
    release: Any,
) -> None:
    release.install()
    ns = release.namespace

    def role(name: str, rule: dict[str, Any]) -> str:
        # Labelled and named as the operator's own (its admission policy wants both).
        return json.dumps({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"app.kubernetes.io/managed-by": "dflash-operator"}},
            "rules": [rule],
        })  # fmt: skip

    status_rule = {
        "apiGroups": ["dflash.dev"], "resources": ["dflashruns/status"],
        "resourceNames": ["r1"], "verbs": ["get", "patch"],
    }  # fmt: skip
    granted = as_operator(release, "create", "-f", "-", input=role("t-trainer", status_rule))
    assert granted.returncode == 0, granted.stderr
    secrets_rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    escalation = as_operator(release, "create", "-f", "-", input=role("t2-trainer", secrets_rule))
    assert escalation.returncode != 0
    assert "attempting to grant RBAC permissions not currently held" in escalation.stderr


def test_an_existing_service_account_named_by_the_values_gets_the_rights_and_none_is_created(
    release: Any,
) -> None:
    release.service_account = "platform-dflash"
    release.cluster.kubectl("create", "serviceaccount", release.account, "-n", release.namespace)
    release.install(
        "--set", "serviceAccount.create=false", "--set", f"serviceAccount.name={release.account}"
    )
    assert rights(release, release.namespace) == OPERATOR_RIGHTS | leader_rights(release)
    # The chart's default name (the release's) is bound to nothing.
    default_user = f"system:serviceaccount:{release.namespace}:{release.name}"
    assert not can_i(release, "list", "jobs.batch", "-n", "x", as_user=default_user)
    assert release.deployment()["spec"]["template"]["spec"]["serviceAccountName"] == release.account
    assert not [o for o in release.owned([release.namespace]) if o.startswith("serviceaccounts/")]
    # The operator's admission policy holds the named account to its rules.
    unlabelled = json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r1-config"}}
    )

    def refused() -> bool:
        result = as_operator(release, "create", "--dry-run=server", "-f", "-", input=unlabelled)
        words = "labelled app.kubernetes.io/managed-by=dflash-operator"
        return result.returncode != 0 and words in result.stderr

    # The API server loads a new policy asynchronously (one CI run created the ConfigMap
    # before it acted): wait until it refuses.
    wait_for("the policy to refuse the named account's unlabelled ConfigMap", refused)


def test_single_namespace_mode_gives_rights_in_the_watched_namespaces_only(
    release: Any, other_namespace: str
) -> None:
    release.install("--set", f"operator.watchNamespaces={{{release.namespace}}}")
    assert rights(release, release.namespace) == (
        OPERATOR_RIGHTS | leader_rights(release) | DISCOVERY_RIGHTS
    )
    assert rights(release, other_namespace) == DISCOVERY_RIGHTS
    for verb, resource in (("list", "dflashruns.dflash.dev"), ("create", "jobs.batch")):
        assert can_i(release, verb, resource, "-n", release.namespace)
        assert not can_i(release, verb, resource, "-n", other_namespace)
        assert not can_i(release, verb, resource, "--all-namespaces")
    owned = release.owned([release.namespace, other_namespace])
    bindings = [o for o in owned if o.startswith("clusterrolebindings")]
    assert bindings == [
        f"clusterrolebindings.rbac.authorization.k8s.io/{release.name}-discovery"
    ], owned


def test_the_user_roles_give_editors_and_viewers_runs_and_nothing_else(
    release: Any, other_namespace: str
) -> None:
    release.install()
    ns = other_namespace
    for role, user in (("editor", "ml-engineer"), ("viewer", "ml-observer")):
        release.cluster.kubectl(
            "create", "rolebinding", f"{user}-{role}", "-n", ns, f"--user={user}",
            f"--clusterrole={release.name}-dflashrun-{role}",
        )  # fmt: skip
    editor, viewer = "ml-engineer", "ml-observer"
    for verb in ("create", "patch", "delete", "list", "watch"):
        assert can_i(release, verb, "dflashruns.dflash.dev", "-n", ns, as_user=editor)
    assert not can_i(
        release, "patch", "dflashruns.dflash.dev", "--subresource=status", "-n", ns, as_user=editor
    )
    assert can_i(release, "get", "dflashruns.dflash.dev", "-n", ns, as_user=viewer)
    assert not can_i(release, "patch", "dflashruns.dflash.dev", "-n", ns, as_user=viewer)
    for user in (editor, viewer):
        assert not can_i(release, "get", "secrets", "-n", ns, as_user=user)
        assert not can_i(release, "get", "dflashruns.dflash.dev", "-n", "default", as_user=user)
    editor_role = release.get("clusterrole", f"{release.name}-dflashrun-editor")
    assert (
        editor_role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    )
