"""Kubernetes Events about pods, as kubelet posts them (Started, Killing, BackOff, Failed,
FailedMount), so `kubectl describe pod` and `kubectl get events` tell what the executor did.
A repeated one bumps the first one's count, as kubelet's event correlator does. Best effort."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from .kube import Kube, namespaced
from .status import now

log = logging.getLogger(__name__)
COMPONENT = "dflash-executor"


def post_event(kube: Kube, pod: dict[str, Any], kind: str, reason: str, message: str) -> str | None:
    """Post one Event about `pod`, returning its name; a failure is logged, never raised
    (events are advisory), and returns None."""
    meta = pod["metadata"]
    stamp = now()
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{secrets.token_hex(8)}",
            "namespace": meta["namespace"],
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "fieldPath": f"spec.containers{{{pod['spec']['containers'][0]['name']}}}",
        },
        "type": kind,
        "reason": reason,
        "message": message,
        "source": {"component": COMPONENT, "host": pod["spec"].get("nodeName", "")},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": COMPONENT,
        "reportingInstance": pod["spec"].get("nodeName", ""),
    }
    try:
        kube.create(namespaced(meta["namespace"], "events"), body)
    except Exception as exc:
        log.debug("event %s for %s/%s not posted: %s", reason, meta["namespace"], meta["name"], exc)
        return None
    return str(body["metadata"]["name"])


class RepeatedEvents:
    """Events a pod gets again and again while it waits (FailedMount at every retry): the
    first is posted, each repeat bumps its count and lastTimestamp."""

    def __init__(self, kube: Kube, kind: str, reason: str) -> None:
        self.kube, self.kind, self.reason = kube, kind, reason
        self._seen: dict[str, tuple[str, int]] = {}  # message -> (event name, count)

    def post(self, pod: dict[str, Any], message: str) -> None:
        seen = self._seen.get(message)
        if seen is None:
            name = post_event(self.kube, pod, self.kind, self.reason, message)
            if name is not None:
                self._seen[message] = (name, 1)
            return
        name, count = seen
        patch = {"count": count + 1, "lastTimestamp": now()}
        try:
            self.kube.patch(namespaced(pod["metadata"]["namespace"], "events", name), patch)
        except Exception as exc:  # expired (the apiserver's event TTL): post it afresh
            log.debug("event %s not updated (%s); posting it again", name, exc)
            del self._seen[message]
            self.post(pod, message)
            return
        self._seen[message] = (name, count + 1)
