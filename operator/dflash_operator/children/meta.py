"""Identity of a run's children: labels, the ownerReference to the run, object metadata,
and the run's S3 root. Every child of every kind gets its metadata from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflash_operator.api.constants import (
    API_VERSION,
    KIND,
    LABEL_ATTEMPT,
    LABEL_MANAGED_BY,
    LABEL_RUN,
    LABEL_RUN_UID,
    LABEL_STAGE,
    MANAGED_BY,
    Stage,
)
from dflash_operator.api.resource import DFlashRun
from dflash_operator.api.spec_storage import StorageSpec

# Operator-internal annotation: the hash of the rendered config files in `<run>-config`.
ANNOTATION_CONFIG_HASH = "dflash.dev/config-hash"
# Operator-internal annotation on a stage's Job / PyTorchJob: what it was rendered from, as
# `<part>:<hash>` pairs (plan/stage_inputs.py); a running child whose inputs changed restarts.
ANNOTATION_SPEC_INPUTS = "dflash.dev/spec-inputs"
# Operator-internal annotation on a workload the operator created because the one before it
# failed (a TrainJob does not restart itself): how many such restarts its stage has made in a
# row, counted against spec.training.maxRestarts. A retry or an edit starts again from none.
ANNOTATION_FAILURE_RESTARTS = "dflash.dev/failure-restarts"
# The server-side label selector of every watch on children (kopf settings.watching).
CHILD_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"


@dataclass(frozen=True)
class RunRef:
    """The few facts about a run every child needs: who owns it and where it lives."""

    name: str
    namespace: str
    uid: str

    @classmethod
    def of(cls, run: DFlashRun) -> RunRef:
        return cls(run.metadata.name, run.metadata.namespace or "default", run.metadata.uid or "")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def build_child_labels(run: RunRef, stage: Stage, attempt: int | None = None) -> dict[str, str]:
    """Labels on a child and its pods: how the operator finds them again. The run's UID tells
    this run's pods from a namesake's even once their Job is gone (and with it the owner
    UID that otherwise ties a pod to the run)."""
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_RUN: run.name, LABEL_STAGE: stage.value}
    if run.uid:
        labels[LABEL_RUN_UID] = run.uid
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    return labels


def build_owner_reference(run: RunRef) -> dict[str, Any]:
    """Garbage collection deletes the child with the run; `controller` marks us as its manager."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": run.name,
        "uid": run.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_metadata(
    run: RunRef,
    name: str,
    stage: Stage,
    attempt: int | None = None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`metadata` of a child: name, namespace, labels, annotations, ownerReference."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": run.namespace,
        # Extra labels first: ours win, so a pool label can never hide a child from us.
        "labels": {**(labels or {}), **build_child_labels(run, stage, attempt)},
        "ownerReferences": [build_owner_reference(run)],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def build_run_root(storage: StorageSpec, run: RunRef) -> str:
    """`s3://<bucket>/<prefix>/<namespace>/<run>/<uid>`: every artifact of the run is below it."""
    prefix = storage.prefix.strip("/")
    return f"s3://{storage.bucket}/{prefix}/{run.namespace}/{run.name}/{run.uid}"
