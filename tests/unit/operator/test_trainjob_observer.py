"""The runtime side of the TrainJob path: which training APIs the cluster serves (discovery,
cached, a failure never taken for "not served"), and a TrainJob's pods found through its
JobSet's UID, never by name."""

from __future__ import annotations

from typing import Any

from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.children.kinds import summarize_jobset
from dflash_operator.plan.observed import PodView
from dflash_operator.runtime.discovery import ServedKinds
from dflash_operator.runtime.observer import JOBSET_INDEX, Observer, lift_to_trainjobs


class FakeDiscovery:
    def __init__(self, answers: dict[str, bool | None]) -> None:
        self.answers = answers
        self.calls = 0

    def serves(self, kind: str) -> bool | None:
        self.calls += 1
        return self.answers[kind]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_served_kinds_are_looked_up_once_per_ttl_whatever_the_number_of_runs() -> None:
    kube, clock = FakeDiscovery({"TrainJob": True, "PyTorchJob": False}), Clock()
    served = ServedKinds(kube, ttl=30, clock=clock)
    for _ in range(100):
        assert served.served() == frozenset({"TrainJob"})
    assert kube.calls == 2
    kube.answers["PyTorchJob"] = True
    clock.now = 31
    assert served.served() == frozenset({"TrainJob", "PyTorchJob"})


def test_a_failed_discovery_keeps_the_last_answer_and_never_says_not_served() -> None:
    kube, clock = FakeDiscovery({"TrainJob": None, "PyTorchJob": True}), Clock()
    served = ServedKinds(kube, ttl=30, clock=clock)
    assert served.served() is None  # unknown, not "TrainJob is missing"
    kube.answers["TrainJob"] = True
    clock.now = 31
    assert served.served() == frozenset({"TrainJob", "PyTorchJob"})
    kube.answers["TrainJob"] = None  # the API server hiccups
    clock.now = 62
    assert served.served() == frozenset({"TrainJob", "PyTorchJob"})


def jobset(uid: str, owner: str | None) -> dict[str, Any]:
    refs = [{"controller": True, "uid": owner, "kind": "TrainJob"}] if owner else []
    return {"metadata": {"name": "r1-train", "uid": uid, "ownerReferences": refs}}


def pod(name: str, jobset_uid: str | None, owner_uid: str | None = "job-uid") -> PodView:
    return PodView(name=name, uid=name, owner_name="r1-train", owner_uid=owner_uid,
                   jobset_uid=jobset_uid)  # fmt: skip


def test_a_trainjobs_pods_are_matched_through_its_jobsets_uid() -> None:
    assert summarize_jobset(jobset("js-1", "tj-1")) == ("js-1", "tj-1")
    assert summarize_jobset(jobset("js-1", None)) is None
    lifted = lift_to_trainjobs(
        [pod("new", "js-2"), pod("old", "js-1"), pod("gone", "js-0"), pod("job", None, "j")],
        {"js-1": "tj-1", "js-2": "tj-2"},
    )
    owners = {p.name: p.owner_uid for p in lifted}
    # The pods of a deleted TrainJob of the same name never count for the new one.
    assert owners == {"new": "tj-2", "old": "tj-1", "gone": None, "job": "j"}


class Indexes(dict[str, Any]):
    pass


def test_the_observer_reports_the_served_kinds_and_lifts_the_pods() -> None:
    key = ("ml", "r1")
    indexes = Indexes({
        "dflash_jobs": {}, "dflash_pytorchjobs": {}, "dflash_trainjobs": {},
        "dflash_configmaps": {}, "dflash_pods": {key: [pod("p", "js-1")]},
        JOBSET_INDEX: {key: [("js-1", "tj-1")]},
    })  # fmt: skip
    served = ServedKinds(FakeDiscovery({"TrainJob": True, "PyTorchJob": True}))
    observer = Observer(indexes, kube=None, served=served)  # type: ignore[arg-type]
    observed = observer.observe("ml", "r1", DFlashRunStatus())
    assert observed.served_kinds == frozenset({"TrainJob", "PyTorchJob"})
    assert [p.owner_uid for p in observed.pods] == ["tj-1"]
