"""Events are aggregated like client-go's: the same event on a run again (a failure retried
every 10 s) bumps the first Event's count instead of creating another object. With the
operator's own account (the chart's RBAC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dflash_dev.kube_wait import get_json
from dflash_operator.children.meta import RunRef
from dflash_operator.plan.actions import Event
from dflash_operator.runtime.events import EventPoster
from dflash_operator.runtime.kube import Kube, load_api_client


def test_a_repeated_event_is_one_event_with_a_count(harness: Any, make_spec: Any) -> None:
    harness.apply_run("r1", make_spec(suspend=True))
    run = RunRef("r1", harness.namespace, harness.run("r1")["metadata"]["uid"])
    poster = EventPoster(Kube(load_api_client(str(harness.operator_kubeconfig)), 5, 30))
    failing = Event("Warning", "ChildCreateFailed", "Could not create Job r1-regen: quota")
    start = datetime.now(UTC)
    for i in range(5):  # five retries, 10 s apart
        poster.post(run, [failing], start + timedelta(seconds=10 * i))
    poster.post(run, [Event("Normal", "StageRunning", "regen is running")], start)

    items = get_json(harness.cluster, "events", "-n", harness.namespace)["items"]
    ours = [e for e in items if e["involvedObject"].get("uid") == run.uid]
    assert sorted((e["reason"], e["count"]) for e in ours) == [
        ("ChildCreateFailed", 5), ("StageRunning", 1),
    ]  # fmt: skip
    failed = next(e for e in ours if e["reason"] == "ChildCreateFailed")
    assert failed["lastTimestamp"] == (start + timedelta(seconds=40)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [e for t, e, _ in harness.events("r1") if t == "Warning"] == ["ChildCreateFailed"]
