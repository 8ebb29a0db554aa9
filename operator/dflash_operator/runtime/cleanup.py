"""Deleting a run whose `cleanupPolicy` is Delete: run a Job that removes its S3 root, wait for
it, then let the finalizer go. The finalizer is released even when the Job fails or cannot
run (with a Warning event), so a run can always be deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from dflash_operator.api.constants import CLEANUP_SCOPES, LABEL_RUN_UID, Reason, Stage
from dflash_operator.api.naming import child_name
from dflash_operator.api.spec_storage import CleanupPolicy
from dflash_operator.api.validation import SpecError, parse_spec
from dflash_operator.children.kinds import JOB
from dflash_operator.children.meta import RunRef, build_run_root
from dflash_operator.plan.actions import Event, EventType
from dflash_operator.plan.placement import Placement, place_stage
from dflash_operator.plan.stages import PlanSettings, StageContext, build_cleanup_child
from dflash_operator.pools import PoolsConfig
from dflash_operator.runtime.events import EventPoster
from dflash_operator.runtime.kube import Kube, KubeError

log = logging.getLogger(__name__)
# How often the delete handler looks at the cleanup Job again.
CLEANUP_POLL_SECONDS = 5.0


class CleanupPendingError(Exception):
    """The cleanup Job has not finished: ask again after `delay` seconds."""

    def __init__(self, message: str, delay: float = CLEANUP_POLL_SECONDS) -> None:
        super().__init__(message)
        self.delay = delay


def _deletion_time(body: Mapping[str, Any]) -> datetime | None:
    raw = (body.get("metadata") or {}).get("deletionTimestamp")
    if not raw:
        return None
    return datetime.fromisoformat(str(raw).replace("Z", "+00:00"))


def _run_uid(job: Mapping[str, Any]) -> str | None:
    return ((job.get("metadata") or {}).get("labels") or {}).get(LABEL_RUN_UID)


_POLICY = CleanupPolicy.DELETE.value
_SCOPE = CLEANUP_SCOPES[_POLICY]


class CleanupRunner:
    def __init__(
        self,
        kube: Kube,
        pools: PoolsConfig,
        settings: PlanSettings,
        timeout: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.pools = pools
        self.settings = settings
        self.timeout = timeout
        self.events = EventPoster(kube)
        self.clock = clock

    def _post(self, run: RunRef, reason: Reason, message: str) -> None:
        type_: EventType = "Warning" if reason == Reason.CLEANUP_FAILED else "Normal"
        self.events.post(run, [Event(type_, reason.value, message)], self.clock())

    def _failed(self, run: RunRef, root: str, error: str) -> None:
        """Release the finalizer with a Warning: the run goes, its artifacts may stay."""
        message = Reason.CLEANUP_FAILED.message(what=_SCOPE, root=root, policy=_POLICY, error=error)
        log.info("%s: %s (finalizer released)", run.key, message)
        self._post(run, Reason.CLEANUP_FAILED, message)

    def run(self, body: Mapping[str, Any]) -> None:
        """Returns when the finalizer may go; raises CleanupPendingError while the Job runs."""
        meta = body.get("metadata") or {}
        run = RunRef(str(meta.get("name")), str(meta.get("namespace")), str(meta.get("uid")))
        try:
            spec = parse_spec(body.get("spec"))
        except SpecError as error:
            self._failed(run, "the run root", str(error))
            return
        root = build_run_root(spec.storage, run)
        name = child_name(run.name, Stage.CLEANUP)
        job = self.kube.get("Job", run.namespace, name)
        deleted_at = _deletion_time(body) or self.clock()
        overdue = self.clock() > deleted_at + timedelta(seconds=self.timeout)
        pending = f"waiting for Job {name} to delete {root}"
        if job is not None and _run_uid(job) != run.uid:
            # An earlier run of the same name left its cleanup Job (kept an hour): it deleted
            # that run's root, not ours. Let it finish, remove it, then start our own.
            if overdue:
                self._failed(run, root, f"Job {name} of an earlier run of this name is in the way")
                return
            if JOB.finished(job).done and not (job.get("metadata") or {}).get("deletionTimestamp"):
                self.kube.delete("Job", run.namespace, name)
            raise CleanupPendingError(
                f"waiting for Job {name} of an earlier run of this name to go"
            )
        if job is None:
            if overdue:
                self._failed(run, root, f"the cleanup Job did not start within {self.timeout:.0f}s")
                return
            placed = place_stage(spec, Stage.CLEANUP, self.pools)
            if not isinstance(placed, Placement):
                self._failed(run, root, placed.message)
                return
            ctx = StageContext(run, spec, root, {Stage.CLEANUP: placed}, self.settings)
            try:
                self.kube.create(build_cleanup_child(ctx, CleanupPolicy.DELETE))
            except KubeError as error:
                if not error.conflict:
                    self._failed(run, root, f"could not create Job {name}: {error.message}")
                    return
            started = Reason.CLEANUP_STARTED.message(
                job=name, what=_SCOPE, root=root, policy=_POLICY
            )
            self._post(run, Reason.CLEANUP_STARTED, started)
            raise CleanupPendingError(pending)
        finished = JOB.finished(job)
        if not finished.done:
            if overdue:
                self._failed(
                    run,
                    root,
                    f"Job {name} did not finish within {self.timeout:.0f}s; artifacts may remain",
                )
                return
            raise CleanupPendingError(pending)
        if finished.ok:
            message = Reason.ARTIFACTS_DELETED.message(
                job=name, what=_SCOPE, root=root, summary="the finalizer is released"
            )
            log.info("%s: %s", run.key, message)
            self._post(run, Reason.ARTIFACTS_DELETED, message)
        else:
            self._failed(run, root, f"Job {name} failed ({finished.message}); artifacts may remain")
