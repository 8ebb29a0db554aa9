"""The DFlashRun CustomResourceDefinition, built from the models (never edited by hand):
identity, printer columns, the structural schema and the rules on `metadata.name`.
"""

from __future__ import annotations

from typing import Any

from dflash_operator.api import constants as c
from dflash_operator.api.naming import (
    MAX_RUN_NAME_LENGTH,
    NAME_FORM_MESSAGE,
    NAME_TOO_LONG_MESSAGE,
)
from dflash_operator.api.schema import JsonObj, build_openapi_schema
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.status import DFlashRunStatus

# Kubernetes object names are DNS subdomains of at most 253 characters.
MAX_OBJECT_NAME_LENGTH = 253

RUN_DESCRIPTION = (
    "A DFlashRun trains a DFlash speculative-decoding drafter for a target model: "
    "regeneration of answers by the target, data-audit gates, tokenization, multi-node "
    "training with S3 checkpoints, export and acceptance-length evaluation. "
    "Reference: docs/crd-reference.md."
)


def name_rules() -> list[dict[str, str]]:
    """Root-level CEL on `metadata.name` (a CRD may not attach rules to metadata itself).

    CEL sees `metadata.name` as a string of unknown length, so a regex on it is over the
    cost budget; the API server already checks it is a DNS subdomain (lowercase letters,
    digits, '-', '.'), and two cheap checks make it a DNS-1035 label: no '.', and a
    letter first. The API server prints the name next to these messages.
    """
    return [
        {
            "rule": f"self.metadata.name.size() <= {MAX_RUN_NAME_LENGTH}",
            "message": NAME_TOO_LONG_MESSAGE,
        },
        {
            "rule": (
                "!self.metadata.name.contains('.') && "
                "self.metadata.name.substring(0, 1).matches('^[a-z]$')"
            ),
            "message": NAME_FORM_MESSAGE,
        },
    ]


PRINTER_COLUMNS: list[JsonObj] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase",
     "description": "Where the run is in its life."},
    {"name": "Progress", "type": "string", "jsonPath": ".status.progress",
     "description": "Progress of the current stage, e.g. regen 412k/902k or train 12000/40000."},
    {"name": "Loss", "type": "number", "jsonPath": ".status.training.loss",
     "description": "Recent training loss."},
    {"name": "Checkpoint", "type": "integer", "jsonPath": ".status.checkpoint.step",
     "description": "Step of the newest committed checkpoint."},
    {"name": "GPU-h", "type": "number", "jsonPath": ".status.gpuHours.total",
     "description": "GPU-hours the run's pods held, retries included."},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Target", "type": "string", "jsonPath": ".spec.target.model", "priority": 1,
     "description": "The target model."},
    {"name": "Audit", "type": "string", "jsonPath": ".status.auditVerdict", "priority": 1,
     "description": "Verdict of each audit gate that ran."},
    {"name": "Pools", "type": "string", "jsonPath": ".status.nodePools", "priority": 1,
     "description": "Node pool of each stage."},
    {"name": "Launcher", "type": "string", "jsonPath": ".status.launcher", "priority": 1,
     "description": "Workload kind training runs as (trainjob or pytorchjob)."},
]  # fmt: skip


def build_root_schema() -> JsonObj:
    """The whole object's schema: apiVersion, kind, metadata, spec and status."""
    status = build_openapi_schema(DFlashRunStatus)
    return {
        "type": "object",
        "description": RUN_DESCRIPTION,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": f"Always {c.API_VERSION}."},
            "kind": {"type": "string", "description": f"Always {c.KIND}."},
            # Bounds the cost of the CEL rules on the name; the real limit is in name_rules.
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": MAX_OBJECT_NAME_LENGTH}},
            },
            "spec": build_openapi_schema(DFlashRunSpec),
            "status": status,
        },
        "x-kubernetes-validations": name_rules(),
    }


def build_crd() -> dict[str, Any]:
    """The CRD manifest, as applied by `kubectl apply` or installed by the Helm chart."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {"app.kubernetes.io/name": "dflash-operator"},
            # Deleting the CRD deletes every run and, through ownerReferences, every running
            # Job and PyTorchJob: Helm keeps it on uninstall, and Argo CD honours the same
            # annotation (never deleted when the Application is deleted or pruned).
            "annotations": {"helm.sh/resource-policy": "keep"},
        },
        "spec": {
            "group": c.GROUP,
            "names": {
                "kind": c.KIND,
                "listKind": c.LIST_KIND,
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": list(c.CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": build_root_schema()},
                }
            ],
        },
    }
