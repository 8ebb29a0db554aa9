"""The per-run identity of the trainer: a ServiceAccount, a Role that allows `get` and `patch`
on `dflashruns/status` of this one run (and nothing else), and their RoleBinding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dflash_operator.api.constants import GROUP, PLURAL, Stage
from dflash_operator.children.meta import RunRef, build_metadata

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
# The verbs the trainer's progress patch needs (data-contracts section 6), nothing more.
TRAINER_VERBS = ("get", "patch")


def trainer_account_name(run_name: str) -> str:
    """`<run>-trainer`: the ServiceAccount, Role and RoleBinding share it."""
    return f"{run_name}-trainer"


def build_trainer_service_account(
    run: RunRef, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """`annotations` (spec.training.serviceAccountAnnotations) carry a cloud identity: IRSA's
    eks.amazonaws.com/role-arn, GKE's iam.gke.io/gcp-service-account, ..."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": build_metadata(
            run, trainer_account_name(run.name), Stage.TRAIN, annotations=dict(annotations or {})
        ),
        # Only training pods mount a token, and they ask for it explicitly.
        "automountServiceAccountToken": False,
    }


def build_trainer_role(run: RunRef) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "Role",
        "metadata": build_metadata(run, trainer_account_name(run.name), Stage.TRAIN),
        "rules": [
            {
                "apiGroups": [GROUP],
                "resources": [f"{PLURAL}/status"],
                "resourceNames": [run.name],
                "verbs": list(TRAINER_VERBS),
            }
        ],
    }


def build_trainer_role_binding(run: RunRef) -> dict[str, Any]:
    name = trainer_account_name(run.name)
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "RoleBinding",
        "metadata": build_metadata(run, name, Stage.TRAIN),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": run.namespace}],
    }


def build_trainer_access(
    run: RunRef, annotations: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """In creation order: the account, the Role, then the binding that joins them."""
    return [
        build_trainer_service_account(run, annotations),
        build_trainer_role(run),
        build_trainer_role_binding(run),
    ]
