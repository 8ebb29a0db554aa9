"""The chart's ValidatingAdmissionPolicies on the real API server: the operator's account may
write only objects it labelled, bind only <run>-trainer Roles to <run>-trainer accounts and run
stage pods only as the allowed accounts; a run's trainer may write only status.training and
status.checkpoint. Each allowed write passes, each forbidden one is refused with the policy's
message."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import yaml
from dflash_dev import binaries, operator_local
from dflash_dev.kube_wait import wait_for

chart = sys.modules["dflash_chart_test_helpers"]
MANAGED = {"app.kubernetes.io/managed-by": "dflash-operator"}


def as_account(
    release: Any, account: str, namespace: str, *args: str, input: str | None = None
) -> Any:
    kubeconfig = operator_local.token_kubeconfig(
        release.cluster.kubeconfig, release.workdir / f"{account}.kubeconfig",
        account=account, namespace=namespace, duration="1h",
    )  # fmt: skip
    argv = [str(binaries.cached_path("kubectl")), f"--kubeconfig={kubeconfig}", *args]
    return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60)


def create(release: Any, body: dict[str, Any]) -> Any:
    """A server-side dry run of a create as the operator (admission runs, nothing is stored)."""
    return as_account(
        release, release.account, release.namespace, "create", "--dry-run=server", "-f", "-",
        input=json.dumps(body),
    )  # fmt: skip


def config_map(labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "r1-config"}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def job(account: str | None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox"}],
    }
    if account:
        pod["serviceAccountName"] = account
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "r1-regen", "labels": MANAGED},
        "spec": {"template": {"spec": pod}},
    }


def binding(role: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "r1-trainer", "labels": MANAGED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account}],
    }


def refused(result: Any, words: str) -> bool:
    return result.returncode != 0 and words in result.stderr


def test_the_operators_account_writes_only_what_the_policy_allows(release: Any) -> None:
    release.install("--set", "admissionPolicies.stageServiceAccounts={s3-reader}")
    ns = release.namespace
    for account in ("s3-reader", "r1-trainer", "admin"):
        release.cluster.kubectl("create", "serviceaccount", account, "-n", ns)
    # Roles whose rights the operator holds (RBAC would refuse binding any other first).
    for role in ("r1-trainer", "status-editor"):
        release.cluster.kubectl(
            "create", "role", role, "-n", ns, "--verb=get,patch",
            "--resource=dflashruns.dflash.dev/status", "--resource-name=r1",
        )  # fmt: skip
    # The API server loads a new policy asynchronously: wait until it acts.
    wait_for(
        "the policy to refuse an unlabelled ConfigMap",
        lambda: refused(create(release, config_map(None)), "labelled app.kubernetes.io/managed-by"),
    )
    assert create(release, config_map(MANAGED)).returncode == 0

    for account in (None, "s3-reader", "r1-trainer"):
        result = create(release, job(account))
        assert result.returncode == 0, (account, result.stderr)
    result = create(release, job("admin"))
    assert refused(result, "may not run a Job as ServiceAccount admin"), result.stderr

    assert create(release, binding("r1-trainer", "r1-trainer")).returncode == 0
    assert refused(
        create(release, binding("status-editor", "r1-trainer")),
        "may only bind a <run>-trainer Role",
    )
    assert refused(
        create(release, binding("r1-trainer", "admin")), "may only bind a <run>-trainer Role"
    )


def test_a_trainer_writes_only_training_and_checkpoint(release: Any) -> None:
    release.install()
    ns = release.namespace
    run = {
        "apiVersion": "dflash.dev/v1alpha1", "kind": "DFlashRun",
        "metadata": {"name": "r1", "namespace": ns}, "spec": chart.tiny_cpu_run(),
    }  # fmt: skip
    release.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(run))
    release.cluster.kubectl(
        "patch", "dflashrun", "r1", "-n", ns, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"phase": "Training", "message": "training"}}),
    )  # fmt: skip
    release.cluster.kubectl("create", "serviceaccount", "r1-trainer", "-n", ns)
    release.cluster.kubectl(
        "create", "role", "r1-trainer", "-n", ns, "--verb=get,patch",
        "--resource=dflashruns.dflash.dev/status", "--resource-name=r1",
    )  # fmt: skip
    release.cluster.kubectl(
        "create", "rolebinding", "r1-trainer", "-n", ns, "--role=r1-trainer",
        f"--serviceaccount={ns}:r1-trainer",
    )  # fmt: skip

    def patch(status: dict[str, Any], *extra: str) -> Any:
        return as_account(
            release, "r1-trainer", ns, "patch", "dflashrun", "r1", "-n", ns, *extra,
            "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip

    tries: list[Any] = []

    def forged_phase_refused() -> bool:
        # A dry run: a forged write that lands before the policy is loaded must not stick.
        tries.append(patch({"phase": "Succeeded"}, "--dry-run=server"))
        return refused(tries[-1], "not status.phase")

    try:
        wait_for("the policy to refuse a forged phase", forged_phase_refused)
    except AssertionError:
        raise AssertionError(f"last answer: {tries[-1].stdout} {tries[-1].stderr}") from None
    allowed = patch({"training": {"step": 10, "loss": 1.5}, "checkpoint": {"step": 10}})
    assert allowed.returncode == 0, allowed.stderr
    for forged, field in (
        ({"phase": "Succeeded"}, "phase"),
        ({"drafterUri": "s3://evil/drafter"}, "drafterUri"),
        ({"acceptanceLength": 9.9}, "acceptanceLength"),
        ({"conditions": []}, "conditions"),
    ):
        assert refused(patch(forged), f"not status.{field}"), field
    status = json.loads(
        release.cluster.kubectl("get", "dflashrun", "r1", "-n", ns, "-o", "json").stdout
    )["status"]
    assert status["phase"] == "Training" and "drafterUri" not in status
    assert status["training"]["step"] == 10


def test_the_policies_can_be_switched_off(release: Any) -> None:
    manifests = chart.render("--set", "admissionPolicies.enabled=false", name=release.name)
    kinds = {m["kind"] for m in manifests}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    on = {m["kind"] for m in chart.render(name=release.name)}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= on
