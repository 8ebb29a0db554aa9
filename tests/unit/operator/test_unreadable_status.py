"""A status this operator cannot read (a newer version's enum value, a hand edit) is never
taken for an empty one: the run is left exactly as it is, nothing is created or written."""

from __future__ import annotations

from typing import Any

import pytest
from dflash_operator.plan.observed import Observed
from dflash_operator.plan.planner import UnreadableStatusError, parse_status
from dflash_operator.plan.stages import PlanSettings
from dflash_operator.pools import PoolsConfig
from dflash_operator.runtime.reconciler import Reconciler

FINISHED_BY_A_NEWER_OPERATOR = {
    "phase": "Distilled",  # a phase of a newer version: this one does not know it
    "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                    "message": "done", "lastTransitionTime": "2026-11-01T00:00:00Z"}],
    "stages": {"regeneration": {"shardsDone": 64, "shardsTotal": 64}},
}  # fmt: skip


class RecordingKube:
    """Answers the run; records every other call (there must be none)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.calls: list[str] = []

    def get_run(self, namespace: str, name: str) -> dict[str, Any]:
        return self.body

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise AssertionError(f"the reconciler called kube.{name} on an unreadable run")

        return record


class NoChildren:
    def observe(self, *_: Any) -> Observed:
        raise AssertionError("nothing is observed for an unreadable run")


def test_an_unreadable_status_names_the_field_and_the_value() -> None:
    with pytest.raises(UnreadableStatusError) as raised:
        parse_status(FINISHED_BY_A_NEWER_OPERATOR)
    assert "status.phase='Distilled'" in str(raised.value)


def test_a_run_with_an_unreadable_status_is_left_alone(pools: PoolsConfig, make_body: Any) -> None:
    body = make_body(status=FINISHED_BY_A_NEWER_OPERATOR)
    kube = RecordingKube(body)
    reconciler = Reconciler(kube, NoChildren(), pools, PlanSettings())  # type: ignore[arg-type]
    result = reconciler.reconcile("ml", "r1")
    assert kube.calls == []
    assert not result.wrote_status and result.requeue_after is None
