"""The likelihood monitor's verdict as the operator reads it: the whole verdict is an object in
the run root (`<report folder>/verdict.json`), and the termination message is a bounded summary
of it plus that object's URI. The verdict itself is built in `likelihood_report.py`.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dflash_trainer.messages import shorten
from dflash_trainer.storage import StorageError, join_uri, store_for

log = logging.getLogger(__name__)

# The kubelet keeps 4096 bytes of a termination message; the summary stays well under it so
# that a cut can never make the verdict unreadable (the operator fails closed on a cut one).
SUMMARY_LIMIT = 2048
# Failing sources named in the summary (worst first); the rest are in the verdict object.
MAX_LISTED_SOURCES = 5
MAX_SUMMARY_MESSAGE = 300
VERDICT_FILE = "verdict.json"
# Keys of the stage result that the summary keeps as they are (all small, bounded types).
_KEPT = ("stage", "ok", "gate", "verdict", "step", "metrics", "reportUri")


def _bounded_violation(violation: dict[str, Any], listed: int) -> dict[str, Any]:
    sources = list(violation.get("sources") or [])
    kept = sources[:listed]
    out = {k: v for k, v in violation.items() if k not in ("sources", "perSource", "message")}
    out["sources"] = kept
    out["sourcesTotal"] = len(sources)
    per_source = violation.get("perSource") or {}
    out["perSource"] = {s: per_source[s] for s in kept if s in per_source}
    message = str(violation.get("message") or "")
    if len(sources) > len(kept):
        message = f"{message} [{len(sources) - len(kept)} more failing sources in the verdict]"
    out["message"] = shorten(message, MAX_SUMMARY_MESSAGE)
    return out


def build_summary(payload: dict[str, Any], verdict_uri: str) -> dict[str, Any]:
    """The termination message for a monitor stop: at most SUMMARY_LIMIT bytes, whatever the
    number of failing sources, and the URI of the whole verdict."""
    for listed in range(MAX_LISTED_SOURCES, -1, -1):
        summary = {k: payload[k] for k in _KEPT if k in payload}
        summary["message"] = shorten(str(payload.get("message") or ""), MAX_SUMMARY_MESSAGE)
        summary["violations"] = [
            _bounded_violation(v, listed) for v in (payload.get("violations") or [])[:1]
        ]
        summary["verdictUri"] = verdict_uri
        if len(json.dumps(summary).encode()) <= SUMMARY_LIMIT:
            return summary
    # Only a pathological URI or source name gets here: keep the verdict, drop the detail.
    summary = {k: payload[k] for k in ("stage", "ok", "gate", "verdict", "step") if k in payload}
    summary["message"] = "training stopped by the likelihood monitor: see verdictUri"
    summary["verdictUri"] = shorten(verdict_uri, SUMMARY_LIMIT // 2)
    return summary


def read_stop_verdict(folder: str) -> dict[str, Any] | None:
    """The verdict an earlier attempt of this run stopped with, or None when there is none.

    The monitor stop exits non-zero, and a training pod restarted in place (OnFailure) runs the
    trainer again before the operator deletes the child: it must not train on data the monitor
    already judged bad. Fail closed: a verdict object that exists but cannot be read counts as
    a stop (its message says so); one whose presence cannot be checked is logged, and training
    goes on (the operator still reads the first attempt's stop)."""
    uri = join_uri(folder, VERDICT_FILE)
    store = store_for(folder)
    try:
        if not store.exists(uri):
            return None
    except StorageError as exc:
        log.warning("could not check for an earlier monitor verdict at %s: %s", uri, exc)
        return None
    try:
        verdict = json.loads(store.read_bytes(uri))
    except (StorageError, ValueError) as exc:
        return {"stage": "train", "ok": False, "gate": "training", "verdict": "fail",
                "message": f"an earlier attempt was stopped by the likelihood monitor; its "
                f"verdict {uri} cannot be read ({exc})"}  # fmt: skip
    return verdict if isinstance(verdict, dict) else {"stage": "train", "ok": False,
                                                       "verdict": "fail", "message": str(verdict)}  # fmt: skip


def write_verdict(payload: dict[str, Any], folder: str) -> str:
    """The whole verdict as `<folder>/verdict.json`; its URI. A write failure is logged: the
    summary still carries the verdict, and the operator still stops the run."""
    uri = join_uri(folder, VERDICT_FILE)
    try:
        store_for(folder).write_bytes(uri, json.dumps(payload, indent=1).encode())
    except StorageError as exc:
        log.warning("could not write the monitor's verdict to %s: %s", uri, exc)
    return uri
