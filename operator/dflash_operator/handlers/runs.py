"""DFlashRun handlers: create, update (spec, labels, annotations) and resume all mean
"reconcile this run"; delete runs the S3 cleanup when the run asks for it.
"""

from __future__ import annotations

from typing import Any

import kopf

from dflash_operator.api.constants import GROUP, PLURAL, VERSION
from dflash_operator.api.spec_storage import CleanupPolicy
from dflash_operator.runtime.cleanup import CleanupPendingError


def _enqueue(memo: kopf.Memo, namespace: str | None, name: str | None) -> None:
    if namespace and name:
        memo.controller.enqueue(namespace, name)


@kopf.on.create(GROUP, VERSION, PLURAL)
def run_created(namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any) -> None:
    _enqueue(memo, namespace, name)


@kopf.on.update(GROUP, VERSION, PLURAL)
def run_updated(namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any) -> None:
    _enqueue(memo, namespace, name)


@kopf.on.resume(GROUP, VERSION, PLURAL)
def run_resumed(namespace: str | None, name: str | None, memo: kopf.Memo, **_: Any) -> None:
    _enqueue(memo, namespace, name)


def _deletes_artifacts(spec: kopf.Spec, **_: Any) -> bool:
    storage = spec.get("storage") or {}
    return bool(storage.get("cleanupPolicy") == CleanupPolicy.DELETE.value)


@kopf.on.delete(GROUP, VERSION, PLURAL, when=_deletes_artifacts)
def run_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """cleanupPolicy Delete: run the S3 cleanup Job; the finalizer goes when it is done."""
    try:
        memo.cleanup.run(body)
    except CleanupPendingError as pending:
        raise kopf.TemporaryError(str(pending), delay=pending.delay) from None
