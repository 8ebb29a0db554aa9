"""Kubernetes Events on a run (`kubectl describe dfr` shows them): one per transition or
failure, each with a CamelCase reason and a human message. Posting is best effort: a lost
event never fails a reconcile; the conditions in status are the durable record.

Repeats are aggregated the way client-go's EventCorrelator does: the same event (run, type,
reason, message) again within `AGGREGATION_SECONDS` bumps `count` and `lastTimestamp` of the
first one (a PATCH) instead of creating another object, so a failure retried every 10 s is one
Event with a growing count, not hundreds.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dflash_operator.api.constants import API_VERSION, KIND
from dflash_operator.children.meta import RunRef
from dflash_operator.plan.actions import Event
from dflash_operator.runtime.kube import Kube, KubeError

log = logging.getLogger(__name__)
COMPONENT = "dflash-operator"
# Events carry at most 1 KiB of message (the API server's limit is larger; people read these).
MAX_EVENT_MESSAGE = 1024
# A repeat within this long updates the earlier Event (client-go: 10 minutes).
AGGREGATION_SECONDS = 600.0
# Recent events remembered for aggregation (oldest forgotten first).
MAX_REMEMBERED = 4096


def _time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def build_event(run: RunRef, event: Event, now: datetime, instance: str) -> dict[str, Any]:
    """A core/v1 Event about the run (no secret ever reaches a message: none is read)."""
    message = event.message
    if len(message) > MAX_EVENT_MESSAGE:
        message = message[: MAX_EVENT_MESSAGE - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{run.name}.{secrets.token_hex(8)}", "namespace": run.namespace},
        "involvedObject": {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": run.name,
            "namespace": run.namespace,
            "uid": run.uid,
        },
        "type": event.type,
        "reason": event.reason,
        "message": message,
        "source": {"component": COMPONENT},
        "reportingComponent": f"dflash.dev/{COMPONENT}",
        "reportingInstance": instance,
        "action": event.reason,
        "firstTimestamp": _time(now),
        "lastTimestamp": _time(now),
        "count": 1,
    }


@dataclass
class _Posted:
    name: str
    count: int
    last: datetime


class EventPoster:
    """Thread-safe (the workers share one)."""

    def __init__(self, kube: Kube, instance: str | None = None) -> None:
        self.kube = kube
        self.instance = instance or socket.gethostname()
        self._recent: OrderedDict[tuple[str, str, str, str], _Posted] = OrderedDict()
        self._lock = threading.Lock()

    def post(self, run: RunRef, events: Iterable[Event], now: datetime) -> None:
        for event in events:
            log.info("%s %s: %s", run.key, event.reason, event.message)
            try:
                self._post_one(run, event, now)
            except KubeError as error:
                log.warning("could not post event %s on %s: %s", event.reason, run.key, error)

    def _post_one(self, run: RunRef, event: Event, now: datetime) -> None:
        key = (run.uid, event.type, event.reason, event.message)
        with self._lock:
            seen = self._recent.get(key)
            if seen is not None and (now - seen.last).total_seconds() > AGGREGATION_SECONDS:
                seen = None
            if seen is not None:
                seen.count += 1
                seen.last = now
                self._recent.move_to_end(key)
                name, count = seen.name, seen.count
        if seen is not None:
            patch = {"count": count, "lastTimestamp": _time(now)}
            try:
                self.kube.patch("Event", run.namespace, name, patch)
                return
            except KubeError as error:
                if not error.not_found:  # expired (events live an hour): post a new one
                    raise
        body = build_event(run, event, now, self.instance)
        self.kube.create_event(run.namespace, body)
        with self._lock:
            self._recent[key] = _Posted(body["metadata"]["name"], 1, now)
            self._recent.move_to_end(key)
            while len(self._recent) > MAX_REMEMBERED:
                self._recent.popitem(last=False)
