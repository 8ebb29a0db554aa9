"""Runtime pieces that need no cluster: the work queue, the status patch, events."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from dflash_operator.children.meta import RunRef
from dflash_operator.plan.actions import Event
from dflash_operator.runtime.events import MAX_EVENT_MESSAGE, build_event
from dflash_operator.runtime.reconciler import build_status_patch
from dflash_operator.runtime.workqueue import WorkQueue


def test_a_key_added_many_times_is_processed_once() -> None:
    queue = WorkQueue()
    for _ in range(5):
        queue.add("ns/a")
    queue.add("ns/b")
    assert [queue.get(0), queue.get(0), queue.get(0)] == ["ns/a", "ns/b", None]


def test_a_key_added_while_processing_runs_again_after_but_never_twice_at_once() -> None:
    queue = WorkQueue()
    queue.add("ns/a")
    key = queue.get(0)
    queue.add("ns/a")
    assert queue.get(0) is None  # still processing: not handed to a second worker
    queue.done(key or "")
    assert queue.get(0) == "ns/a"


def test_failures_back_off_exponentially_and_forget_resets() -> None:
    queue = WorkQueue(base_backoff=0.01, max_backoff=0.04)
    delays = [queue.add_rate_limited("ns/a") for _ in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.04]
    queue.forget("ns/a")
    assert queue.add_rate_limited("ns/a") == 0.01


def test_a_delayed_key_arrives_after_its_delay() -> None:
    queue = WorkQueue()
    started = time.monotonic()
    queue.add_after("ns/a", 0.05)
    assert queue.get(timeout=1) == "ns/a"
    assert time.monotonic() - started >= 0.05


def test_shutdown_wakes_waiting_workers() -> None:
    queue = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    queue.shutdown()
    worker.join(2)
    assert got == [None]


def test_the_status_patch_holds_only_changes_and_never_the_trainers_keys() -> None:
    old = {"phase": "Training", "message": "a", "training": {"step": 5}, "progress": "x"}
    new = {"phase": "Training", "message": "b", "training": {"step": 1}, "checkpoint": {"step": 1}}
    assert build_status_patch(old, new) == {"message": "b", "progress": None}
    assert build_status_patch(new, new) == {}


def test_an_event_names_the_run_and_keeps_messages_short() -> None:
    run = RunRef("r1", "ml", "uid-1")
    event = build_event(
        run, Event("Warning", "AuditFailed", "x" * 5000), datetime(2026, 5, 1, tzinfo=UTC), "host"
    )
    assert event["involvedObject"] == {
        "apiVersion": "dflash.dev/v1alpha1",
        "kind": "DFlashRun",
        "name": "r1",
        "namespace": "ml",
        "uid": "uid-1",
    }
    assert (event["type"], event["reason"]) == ("Warning", "AuditFailed")
    assert len(event["message"]) == MAX_EVENT_MESSAGE
    assert event["metadata"]["name"].startswith("r1.")


def test_a_reconcile_asking_to_retry_later_waits_that_long_not_the_backoffs_first_step() -> None:
    """A creation refused for a reason that may pass asks for 10 s (CREATE_RETRY_SECONDS): the
    work queue honours it (docs: retries every 10 s), growing only past it with the backoff."""
    from dflash_operator.runtime.controller import Controller
    from dflash_operator.runtime.reconciler import CREATE_RETRY_SECONDS, Result

    class Refused:
        def reconcile(self, namespace: str, name: str) -> Result:
            return Result(requeue_after=CREATE_RETRY_SECONDS, retry=True)

    controller = Controller(Refused(), 1, 60.0, list)  # type: ignore[arg-type]
    before = time.monotonic()
    controller._process("ns/a")
    due, _seq, key = controller.queue._delayed[0]
    assert key == "ns/a"
    assert due - before >= CREATE_RETRY_SECONDS
    assert controller.queue.add_rate_limited("ns/b", at_least=10.0) == 10.0
    assert [controller.queue.add_rate_limited("ns/c", at_least=1.0) for _ in range(4)] == [
        1.0, 1.0, 2.0, 4.0,
    ]  # fmt: skip


def test_a_key_scheduled_again_and_again_is_scheduled_once_at_its_earliest_time() -> None:
    """A queued run asks to be looked at again in 10 s at every reconcile, and the resync runs
    it every 5 s: without this, each reconcile would add one more future reconcile."""
    queue = WorkQueue()
    for delay in (0.3, 0.2, 0.25, 0.4):
        queue.add_after("ns/a", delay)
    assert len(queue._delayed) == 2  # 0.3, then the earlier 0.2 (0.25 and 0.4 are later)
    time.sleep(0.35)
    assert queue.get(0.1) == "ns/a"
    queue.done("ns/a")
    assert queue.get(0.2) is None  # the superseded 0.3 entry adds nothing
    queue.add_after("ns/a", 0.01)
    assert queue.get(0.5) == "ns/a"


class _LookupKube:
    """Answers GETs by name: present, absent (None) or forbidden (403); records creations."""

    def __init__(
        self,
        present: set[tuple[str, str]],
        forbidden: set[str],
        unserved: frozenset[str] = frozenset(),
    ) -> None:
        self.present, self.forbidden, self.unserved = present, forbidden, unserved
        self.created: list[str] = []

    def serves(self, kind: str) -> bool | None:
        return kind not in self.unserved

    def get(self, kind: str, namespace: str, name: str) -> dict[str, object] | None:
        from dflash_operator.runtime.kube import KubeError

        if kind in self.forbidden:
            raise KubeError(403, "Forbidden", f"cannot get {kind}")
        return {"kind": kind} if (kind, name) in self.present else None

    def create(self, manifest: dict[str, object]) -> dict[str, object]:
        self.created.append(str(manifest["kind"]))
        return {**manifest, "metadata": {**manifest["metadata"], "uid": "u1"}}  # type: ignore[dict-item]


def test_a_child_whose_named_objects_are_missing_is_not_created_and_unknown_ones_never_block() -> (
    None
):
    from dflash_operator.plan.actions import CreateChild, LookUp
    from dflash_operator.plan.observed import ObjectRef
    from dflash_operator.runtime.executor import Executor

    priority = ObjectRef("PriorityClass", "ml-batch", "spec.priorityClassName")
    queue = ObjectRef("LocalQueue", "team-a", "spec.queueName")
    account = ObjectRef("ServiceAccount", "s3-reader", "spec.serviceAccountName")
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "r1-regen", "namespace": "ml"},
    }
    kube = _LookupKube(present={("ServiceAccount", "s3-reader")}, forbidden={"LocalQueue"})
    executor = Executor(kube)  # type: ignore[arg-type]

    outcome = executor.run(
        "ml", "uid", [CreateChild(manifest, requires=(priority, queue, account))]
    )
    assert kube.created == []
    (failure,) = outcome.failures
    assert failure.missing == (priority,) and not failure.permanent
    assert {(lk.ref.kind, lk.exists) for lk in outcome.lookups} == {
        ("PriorityClass", False),
        ("LocalQueue", None),
        ("ServiceAccount", True),
    }

    kube.present.add(("PriorityClass", "ml-batch"))  # created meanwhile
    outcome = executor.run(
        "ml", "uid", [CreateChild(manifest, requires=(priority, queue, account))]
    )
    assert kube.created == ["Job"] and not outcome.failures

    outcome = executor.run("ml", "uid", [LookUp((queue, account))])
    assert [(lk.ref.kind, lk.exists) for lk in outcome.lookups] == [
        ("LocalQueue", None),
        ("ServiceAccount", True),
    ]


def test_a_cluster_scoped_kind_has_no_namespace_in_its_path() -> None:
    from dflash_operator.runtime.kube import RESOURCES

    assert (
        RESOURCES["PriorityClass"].path("ml", "x") == "/apis/scheduling.k8s.io/v1/priorityclasses/x"
    )
    assert RESOURCES["LocalQueue"].path("ml", "q") == (
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/localqueues/q"
    )


def test_a_lookup_whose_api_is_not_served_names_the_api_and_never_blocks() -> None:
    from dflash_operator.plan.actions import CreateChild
    from dflash_operator.plan.observed import ObjectRef
    from dflash_operator.runtime.executor import Executor

    queue = ObjectRef("LocalQueue", "team-a", "spec.queueName")
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "r1-regen", "namespace": "ml"},
    }
    kube = _LookupKube(present=set(), forbidden=set(), unserved=frozenset({"LocalQueue"}))
    outcome = Executor(kube).run("ml", "uid", [CreateChild(manifest, requires=(queue,))])  # type: ignore[arg-type]

    assert kube.created == ["Job"] and not outcome.failures  # never ObjectMissing
    (lookup,) = outcome.lookups
    assert lookup.exists is None
    assert lookup.not_served is not None
    assert lookup.not_served.startswith("Kueue LocalQueue v1beta2 is not served: install Kueue")
    assert "kueue.x-k8s.io/v1beta2 localqueues" in lookup.not_served
