"""Carries out a plan's actions, idempotently: a create that finds the name taken adopts the
object if it is ours, the config is replaced only when it differs, deletes tolerate 404.
Returns what it saw, so the planner can re-plan with it before status is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dflash_operator import metrics
from dflash_operator.api.constants import Stage
from dflash_operator.children.kinds import KINDS, run_owner_uid, summarize_child
from dflash_operator.plan.actions import (
    Action,
    ApplyConfig,
    CreateChild,
    DeleteChild,
    LookUp,
    SetDeadline,
    SetSuspend,
    SetWorkloadActive,
)
from dflash_operator.plan.observed import ChildView, CreateFailure, Lookup, ObjectRef
from dflash_operator.runtime.faults import fault_point
from dflash_operator.runtime.kube import Kube, KubeError, describe_not_served

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What the executor changed or learned."""

    children: list[ChildView] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    failures: list[CreateFailure] = field(default_factory=list)
    lookups: list[Lookup] = field(default_factory=list)
    created: int = 0


def view_of(body: Mapping[str, Any], stage: Stage | None) -> ChildView:
    """The planner's view of any object we made (Jobs in detail, the rest by identity)."""
    summary = summarize_child(body)
    if summary is not None:
        return summary
    meta = body.get("metadata") or {}
    return ChildView(
        kind=str(body.get("kind")),
        api_version=str(body.get("apiVersion")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        owner_uid=run_owner_uid(meta),
        stage=stage,
    )


class Executor:
    """Runs actions for one run; stops at the first creation that fails."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def run(self, namespace: str, run_uid: str, actions: Iterable[Action]) -> Outcome:
        outcome = Outcome()
        for action in actions:
            if isinstance(action, CreateChild):
                if not self._create(namespace, run_uid, action, outcome):
                    break
            elif isinstance(action, ApplyConfig):
                if not self._apply_config(namespace, run_uid, action, outcome):
                    break
            elif isinstance(action, SetSuspend):
                body = self.kube.patch(
                    action.kind,
                    namespace,
                    action.name,
                    KINDS[action.kind].suspend_patch(action.suspend),
                )
                view = view_of(body, None)
                outcome.children.append(view)
                fault_point(f"after-suspend:{view.stage.value if view.stage else '?'}")
            elif isinstance(action, SetDeadline):
                patch = KINDS[action.kind].control_patch(activeDeadlineSeconds=action.seconds)
                body = self.kube.patch(action.kind, namespace, action.name, patch)
                outcome.children.append(view_of(body, None))
            elif isinstance(action, SetWorkloadActive):
                patch = {"spec": {"active": action.active}}
                self.kube.patch("Workload", namespace, action.name, patch)
            elif isinstance(action, DeleteChild):
                self.kube.delete(action.kind, namespace, action.name)
                outcome.deleted.append((action.kind, action.name))
                fault_point(f"after-delete:{action.kind}")
            elif isinstance(action, LookUp):
                outcome.lookups.extend(self._look_up(namespace, action.refs))
        return outcome

    def _look_up(self, namespace: str, refs: Iterable[ObjectRef]) -> list[Lookup]:
        """Whether each object exists: a GET by name. A 404 is "missing" only when discovery
        says the cluster serves the API; an API it does not serve is named instead. A 403 (an
        older chart's RBAC) or any other failure leaves it unknown (never reported missing,
        never blocking)."""
        found = []
        for ref in refs:
            unserved = None
            try:
                exists: bool | None = self.kube.get(ref.kind, namespace, ref.name) is not None
                if not exists:
                    served = self.kube.serves(ref.kind)
                    exists = False if served else None
                    if served is False:
                        unserved = describe_not_served(ref.kind)
            except KubeError as error:
                log.debug("could not look up %s %s: %s", ref.kind, ref.name, error)
                exists = None
            found.append(Lookup(ref, exists, unserved))
        return found

    def _adopt(self, kind: str, namespace: str, name: str, run_uid: str) -> dict[str, Any]:
        """The existing object of that name, if it is this run's; else a KubeError."""
        body = self.kube.get(kind, namespace, name)
        if body is None:
            raise KubeError(
                409, "AlreadyExists", f"{kind} {name} exists but could not be read back"
            )
        owner = run_owner_uid(body.get("metadata") or {})
        if owner != run_uid:
            raise KubeError(
                409,
                "AlreadyExists",
                f"{kind} {name} already exists and belongs to another owner ({owner or 'none'}); "
                "delete it or rename the run",
            )
        return body

    def _create(self, namespace: str, run_uid: str, action: CreateChild, outcome: Outcome) -> bool:
        if action.requires:
            lookups = self._look_up(namespace, action.requires)
            outcome.lookups.extend(lookups)
            missing = tuple(lookup.ref for lookup in lookups if lookup.exists is False)
            if missing:
                names = ", ".join(f"{ref.kind} {ref.name}" for ref in missing)
                outcome.failures.append(
                    CreateFailure(action.kind, action.name, f"missing {names}", missing=missing)
                )
                return False
        try:
            try:
                body = self.kube.create(action.manifest)
                outcome.created += 1
                metrics.CHILDREN_CREATED.labels(action.kind).inc()
                log.info("created %s %s/%s", action.kind, namespace, action.name)
            except KubeError as error:
                if not error.conflict:
                    raise
                body = self._adopt(action.kind, namespace, action.name, run_uid)
        except KubeError as error:
            outcome.failures.append(
                CreateFailure(
                    action.kind, action.name, error.message, permanent=error.permanent,
                    api_missing=error.not_found,
                )
            )  # fmt: skip
            return False
        outcome.children.append(view_of(body, action.stage))
        stage = action.stage.value if action.stage else "-"
        fault_point(f"after-create:{action.kind}:{stage}")
        return True

    def _apply_config(
        self, namespace: str, run_uid: str, action: ApplyConfig, outcome: Outcome
    ) -> bool:
        try:
            try:
                body = self.kube.create(action.manifest)
                outcome.created += 1
            except KubeError as error:
                if not error.conflict:
                    raise
                existing = self._adopt("ConfigMap", namespace, action.name, run_uid)
                manifest = dict(action.manifest)
                manifest["metadata"] = {
                    **action.manifest["metadata"],
                    "resourceVersion": existing["metadata"]["resourceVersion"],
                }
                body = self.kube.replace(manifest)
                log.info("updated ConfigMap %s/%s", namespace, action.name)
        except KubeError as error:
            outcome.failures.append(
                CreateFailure("ConfigMap", action.name, error.message, permanent=error.permanent)
            )
            return False
        outcome.children.append(view_of(body, Stage.CONFIG))
        fault_point("after-apply-config")
        return True
