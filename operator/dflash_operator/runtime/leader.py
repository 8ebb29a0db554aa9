"""Leader election on a `coordination.k8s.io/v1` Lease, the way client-go's `leaderelection`
does it, so that with `replicas: 2` exactly one operator acts and the other stands by.

- A standby takes the Lease only when its record has not changed for `duration` seconds of its
  own clock (never comparing the holder's timestamps with ours: no clock-skew assumption), or
  when the holder released it. Every write is a PUT with the resourceVersion it read, so two
  candidates can never both win (one gets 409).
- The leader renews every `retry_period`; if it could not renew for `renew_deadline`
  (< `duration`), it stops at once (the process exits and is restarted as a standby), before any
  standby may take over: two instances never act on one run.
- On a clean shutdown the leader releases the Lease (empty holder), so the standby takes over
  within one `retry_period` instead of waiting out the lease.

kopf peering was not used: it pauses handlers of lower-priority peers (a dev/prod tool) and
does not elect among equal replicas; our reconcile workers and resync run outside kopf anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dflash_operator.runtime.kube import Kube, KubeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseSettings:
    name: str
    namespace: str
    identity: str
    duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


def micro_time(now: datetime) -> str:
    """metav1.MicroTime."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        kube: Kube,
        settings: LeaseSettings,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.monotonic = monotonic
        self.wall = wall
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._stop = threading.Event()

    @property
    def identity(self) -> str:
        return self.settings.identity

    def _manifest(self, spec: dict[str, Any], body: dict[str, Any] | None) -> dict[str, Any]:
        meta = dict((body or {}).get("metadata") or {})
        meta.update(name=self.settings.name, namespace=self.settings.namespace)
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec}  # fmt: skip

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True if we hold the Lease now."""
        s = self.settings
        now = micro_time(self.wall())
        body = self.kube.get("Lease", s.namespace, s.name)
        mine = {"holderIdentity": s.identity, "leaseDurationSeconds": int(s.duration),
                "acquireTime": now, "renewTime": now, "leaseTransitions": 0}  # fmt: skip
        if body is None:
            try:
                self.kube.create(self._manifest(mine, None))
            except KubeError as error:
                if error.conflict:
                    return False
                raise
            self._record(mine)
            return True
        record = dict(body.get("spec") or {})
        if record != self._observed:
            self._observed, self._observed_at = record, self.monotonic()
        holder = record.get("holderIdentity") or ""
        expired = self._observed_at + s.duration < self.monotonic()
        if holder and holder != s.identity and not expired:
            return False
        spec = {**record, "holderIdentity": s.identity, "renewTime": now,
                "leaseDurationSeconds": int(s.duration)}  # fmt: skip
        if holder != s.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(record.get("leaseTransitions") or 0) + 1
        try:
            self.kube.replace(self._manifest(spec, body))
        except KubeError as error:
            if error.conflict:  # someone else wrote it first
                return False
            raise
        self._record(spec)
        return True

    def _record(self, spec: dict[str, Any]) -> None:
        self._observed, self._observed_at = spec, self.monotonic()
        self._last_renew = self.monotonic()

    def _attempt(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except KubeError as error:
            log.warning("lease %s/%s: %s", self.settings.namespace, self.settings.name, error)
            return False

    def acquire(self) -> bool:
        """Block until we lead (True), or until `stop()` (False). Stands by meanwhile."""
        announced = False
        while not self._stop.is_set():
            if self._attempt():
                log.info("leading as %s (lease %s/%s)", self.identity,
                         self.settings.namespace, self.settings.name)  # fmt: skip
                return True
            if not announced:
                holder = (self._observed or {}).get("holderIdentity") or "?"
                log.info("standing by as %s: %s leads", self.identity, holder)
                announced = True
            self._stop.wait(self.settings.retry_period)
        return False

    def keep_leading(self, on_lost: Callable[[], None]) -> threading.Thread:
        """Renew in a daemon thread; call `on_lost` once renewal failed for renew_deadline."""

        def renew() -> None:
            while not self._stop.wait(self.settings.retry_period):
                if self._attempt():
                    continue
                if self.monotonic() - self._last_renew > self.settings.renew_deadline:
                    on_lost()
                    return

        thread = threading.Thread(target=renew, name="lease-renewal", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def release(self) -> None:
        """Give the Lease up (a clean shutdown): the standby takes over at its next try."""
        self.stop()
        s = self.settings
        try:
            body = self.kube.get("Lease", s.namespace, s.name)
            if body is None or (body.get("spec") or {}).get("holderIdentity") != s.identity:
                return
            spec = {**body["spec"], "holderIdentity": "", "leaseDurationSeconds": 1,
                    "renewTime": micro_time(self.wall())}  # fmt: skip
            self.kube.replace(self._manifest(spec, body))
            log.info("released lease %s/%s", s.namespace, s.name)
        except KubeError as error:
            log.warning("could not release lease %s/%s: %s", s.namespace, s.name, error)
