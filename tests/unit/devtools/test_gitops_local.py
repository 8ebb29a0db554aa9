"""The local Argo CD's settings and the example's fork (gitops.py, gitops_example.py): what the
GitOps e2e tests and `make gitops-up` give Argo CD is what docs/gitops.md tells users to set."""

from __future__ import annotations

import yaml
from dflash_dev import gitops, gitops_example

HEALTH_KEY = "resource.customizations.health.dflash.dev_DFlashRun"


def test_argocd_cm_carries_the_shipped_health_check_and_nothing_else() -> None:
    patch = yaml.safe_load(gitops.HEALTH_PATCH.read_text())
    cm = gitops.build_argocd_cm()

    assert cm["metadata"] == {
        "name": "argocd-cm",
        "namespace": "argocd",
        "labels": {"app.kubernetes.io/part-of": "argocd"},
    }
    assert cm["data"] == patch["data"]
    assert set(cm["data"]) == {HEALTH_KEY}


def test_the_settings_hold_argocds_configmaps_its_secret_and_the_default_project() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in gitops.build_settings()}

    assert ("ConfigMap", "argocd-cm") in kinds
    assert ("Secret", "argocd-secret") in kinds
    assert ("AppProject", "default") in kinds
    assert {name for kind, name in kinds if kind == "ConfigMap"} >= set(gitops.EMPTY_CONFIGMAPS)


def test_every_example_application_points_at_the_fork_with_its_comments_kept() -> None:
    for relative in gitops_example.APPS:
        text = (gitops_example.EXAMPLE / relative).read_text()
        forked = gitops_example.build_app_text(text, "http://127.0.0.1:1/git/dflash-operator.git")

        assert gitops_example.PLACEHOLDER_URL not in forked
        assert yaml.safe_load(forked)["spec"]["source"]["repoURL"].startswith("http://127.0.0.1")
        assert forked.count("\n#") == text.count("\n#")
