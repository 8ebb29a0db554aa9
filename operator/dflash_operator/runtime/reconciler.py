"""One reconcile of one run: read it, observe its children, plan, act, re-plan with what the
actions produced, write the status if (and only if) it changed, post the events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from dflash_operator import metrics
from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.children.meta import RunRef
from dflash_operator.plan.actions import Plan
from dflash_operator.plan.observed import Observed
from dflash_operator.plan.planner import PlanInput, UnreadableStatusError, parse_status, plan
from dflash_operator.plan.stages import PlanSettings
from dflash_operator.pools import PoolsConfig
from dflash_operator.runtime.events import EventPoster
from dflash_operator.runtime.executor import Executor
from dflash_operator.runtime.faults import fault_point
from dflash_operator.runtime.kube import Kube, KubeError

log = logging.getLogger(__name__)
# Status keys the trainer owns (data-contracts section 6): never part of our patch.
TRAINER_KEYS = frozenset({"training", "checkpoint"})
# After a creation failed for a reason that may pass (quota, RBAC being set up), try again.
CREATE_RETRY_SECONDS = 10.0


class ChildObserver(Protocol):
    def observe(self, namespace: str, run: str, status: DFlashRunStatus) -> Observed: ...


@dataclass(frozen=True)
class Result:
    """What the worker should do next with this run."""

    requeue_after: float | None = None
    # A creation failed in a way that may pass: back off and retry.
    retry: bool = False
    wrote_status: bool = False


def build_status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch from our old status keys to the new ones (trainer keys untouched)."""
    patch: dict[str, Any] = {}
    for key in set(old) | set(new):
        if key in TRAINER_KEYS:
            continue
        if key not in new:
            patch[key] = None
        elif old.get(key) != new[key]:
            patch[key] = new[key]
    return patch


class Reconciler:
    """Stateless apart from its collaborators; safe to call from several worker threads."""

    def __init__(
        self,
        kube: Kube,
        observer: ChildObserver,
        pools: PoolsConfig,
        settings: PlanSettings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.observer = observer
        self.pools = pools
        self.settings = settings
        self.executor = Executor(kube)
        self.events = EventPoster(kube)
        self.clock = clock

    def reconcile(self, namespace: str, name: str) -> Result:
        started = time.perf_counter()
        try:
            return self._reconcile(namespace, name)
        finally:
            metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)

    def _reconcile(self, namespace: str, name: str) -> Result:
        body = self.kube.get_run(namespace, name)
        if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
            # Gone or going: garbage collection and the delete handler take it from here.
            return Result()
        meta = body.get("metadata") or {}
        run = RunRef(name, namespace, str(meta.get("uid")))
        try:
            old_status = parse_status(body.get("status"))
        except UnreadableStatusError as error:
            # Acting would mean starting over (re-running finished stages on GPUs), and writing
            # would erase what a newer operator recorded: leave the run exactly as it is.
            metrics.RECONCILE_ERRORS.labels("unreadable_status").inc()
            log.warning("%s/%s: not acting on this run: %s (fix or remove the field with "
                        "kubectl edit --subresource=status, or run the newer operator)",
                        namespace, name, error)  # fmt: skip
            return Result()
        observed = self.observer.observe(namespace, name, old_status)
        inputs = PlanInput(body, observed, self.pools, self.settings, self.clock())
        first = plan(inputs)
        result, final = self._act(run, inputs, first)
        wrote = self._write(run, old_status, final, has_status=bool(body.get("status")))
        return replace(result, wrote_status=wrote)

    def _act(self, run: RunRef, inputs: PlanInput, first: Plan) -> tuple[Result, Plan]:
        if not first.actions:
            return Result(requeue_after=first.requeue_after), first
        outcome = self.executor.run(run.namespace, run.uid, first.actions)
        observed = (
            inputs.observed.with_children(outcome.children)
            .with_deleting(outcome.deleted)
            .with_failures(outcome.failures)
            .with_lookups(outcome.lookups)
        )
        final = plan(replace(inputs, observed=observed))
        retry = any(not f.permanent for f in outcome.failures)
        requeue = final.requeue_after
        if final.actions and not outcome.failures:
            # More to do now that the first actions landed (e.g. the next stage): go again.
            requeue = 0.0
        if retry:
            requeue = CREATE_RETRY_SECONDS
        return Result(requeue_after=requeue, retry=retry), final

    def _replaced(self, run: RunRef, error: KubeError) -> bool:
        """Did a status write fail because the run it was meant for is gone (the UID test)?"""
        if error.not_found:
            return True
        if error.status != 422:
            return False
        body = self.kube.get_run(run.namespace, run.name)
        return body is None or str((body.get("metadata") or {}).get("uid")) != run.uid

    def _write(self, run: RunRef, old: DFlashRunStatus, final: Plan, has_status: bool) -> bool:
        patch = build_status_patch(old.to_api(), final.status.to_api())
        phase = final.status.phase.value if final.status.phase else "-"
        wrote = False
        if patch:
            fault_point(f"before-status:{phase}")
            try:
                self.kube.patch_run_status(run, patch, has_status)
            except KubeError as error:
                if not self._replaced(run, error):
                    raise
                log.info("%s/%s was deleted or re-created; its old status write was dropped",
                         run.namespace, run.name)  # fmt: skip
                return False
            wrote = True
            fault_point(f"after-status:{phase}")
            for gate in final.gate_failures:
                metrics.GATE_FAILURES.labels(gate.value).inc()
        if final.events:
            self.events.post(run, final.events, self.clock())
            fault_point("after-events")
        return wrote
