"""Kubernetes Events about pods, as kubelet posts them (Started, Killing, BackOff, Failed), so
`kubectl describe pod` and `kubectl get events` tell what the executor did. Best effort."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from .kube import Kube, namespaced
from .status import now

log = logging.getLogger(__name__)
COMPONENT = "dflash-executor"


def post_event(kube: Kube, pod: dict[str, Any], kind: str, reason: str, message: str) -> None:
    """Post one Event about `pod`; a failure is logged, never raised (events are advisory)."""
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
