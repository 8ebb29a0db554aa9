"""Kubernetes Events on a run (`kubectl describe dfr` shows them): one per transition or
failure, each with a CamelCase reason and a human message. Posting is best effort: a lost
event never fails a reconcile; the conditions in status are the durable record.
"""

from __future__ import annotations

import logging
import secrets
import socket
from collections.abc import Iterable
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


class EventPoster:
    def __init__(self, kube: Kube, instance: str | None = None) -> None:
        self.kube = kube
        self.instance = instance or socket.gethostname()

    def post(self, run: RunRef, events: Iterable[Event], now: datetime) -> None:
        for event in events:
            log.info("%s %s: %s", run.key, event.reason, event.message)
            try:
                self.kube.create_event(run.namespace, build_event(run, event, now, self.instance))
            except KubeError as error:
                log.warning("could not post event %s on %s: %s", event.reason, run.key, error)
