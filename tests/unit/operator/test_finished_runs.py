"""A finished run's status still follows its spec's generation: the planner records it without
acting, and the resync loop keeps visiting a finished run whose status lags an edit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from dflash_operator.handlers.children import build_run_entry
from dflash_operator.handlers.lifecycle import needs_resync

PASS = {"verdict": "pass"}


def finished(sim: Callable[..., Any], ok: bool) -> Any:
    world = sim()
    world.step()
    world.finish("r1-regen", ok=ok, result={"samples": 10}, pods=4, exit_code=None if ok else 2)
    world.settle()
    if ok:
        for name, result in (
            ("r1-audit-completions", PASS),
            ("r1-tokenize", {}),
            ("r1-audit-tokens", PASS),
            ("r1-train", {"finalUri": "s3://a/final"}),
            ("r1-eval", {"acceptanceLength": 5.0}),
        ):
            world.finish(name, result=result, pods=2 if name == "r1-train" else 1)
            world.settle()
    assert world.status["phase"] == ("Succeeded" if ok else "Failed")
    return world


def bump(body: dict[str, Any]) -> None:
    body["spec"]["audit"] = {"maxStubRate": 0.2}
    body["metadata"]["generation"] += 1


@pytest.mark.parametrize("ok", [True, False], ids=["succeeded", "failed"])
def test_an_edit_of_a_finished_run_moves_observed_generation_and_nothing_else(
    sim: Callable[..., Any], ok: bool
) -> None:
    world = finished(sim, ok)
    before = dict(world.status)
    created = list(world.created)

    result = world.step(bump)

    assert world.status["observedGeneration"] == world.body["metadata"]["generation"] == 2
    assert result.actions == () and result.events == ()
    assert {k: v for k, v in world.status.items() if k != "observedGeneration"} == {
        k: v for k, v in before.items() if k != "observedGeneration"
    }
    assert world.created == created


@pytest.mark.parametrize(
    ("phase", "lagging", "expected"),
    [
        ("Training", False, True),
        (None, False, True),
        ("AuditFailed", False, True),
        ("Succeeded", False, False),
        ("Failed", False, False),
        ("Succeeded", True, True),
        ("Failed", True, True),
    ],
)
def test_resync_visits_unfinished_runs_and_finished_runs_whose_status_lags(
    phase: str | None, lagging: bool, expected: bool
) -> None:
    assert needs_resync(phase, lagging) is expected


@pytest.mark.parametrize(
    ("status", "meta", "expected"),
    [
        ({"phase": "Succeeded", "observedGeneration": 3}, {"generation": 3}, ("Succeeded", False)),
        ({"phase": "Succeeded", "observedGeneration": 2}, {"generation": 3}, ("Succeeded", True)),
        ({}, {"generation": 1}, (None, True)),
        ({"phase": "Failed"}, {}, ("Failed", False)),
    ],
)
def test_the_runs_index_says_whether_status_lags_the_spec(
    status: dict[str, Any], meta: dict[str, Any], expected: tuple[str | None, bool]
) -> None:
    entry = build_run_entry(status, meta)
    assert (entry.phase, entry.lagging) == expected


def test_the_runs_index_carries_the_runs_gpu_hours_for_the_metric() -> None:
    assert build_run_entry({"gpuHours": {"total": 12.5}}, {}).gpu_hours == 12.5
    assert build_run_entry({"gpuHours": {"total": "x"}}, {}).gpu_hours == 0.0
