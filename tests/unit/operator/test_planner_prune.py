"""cleanupPolicy DeleteIntermediate in the planner: one prune Job after success, its outcome in
the CleanedUp condition, never a second Job, and never a failed run because of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dflash_operator.api.constants import ConditionType
from dflash_operator.plan.actions import CreateChild
from dflash_operator.plan.observed import CreateFailure
from dflash_operator.plan.planner import PlanInput, plan

PASS = {"verdict": "pass"}


def succeeded(sim: Callable[..., Any], make_spec: Callable[..., Any], policy: str) -> Any:
    spec = make_spec(
        storage={"bucket": "artifacts", "cleanupPolicy": policy},
    )
    world = sim(spec=spec)
    world.step()
    for name, result in (
        ("r1-regen", {"samples": 10}),
        ("r1-audit-completions", PASS),
        ("r1-tokenize", {}),
        ("r1-audit-tokens", PASS),
        ("r1-train", {"finalUri": "s3://artifacts/final"}),
        ("r1-eval", {"acceptanceLength": 4.0}),
    ):
        world.finish(name, result=result, pods={"r1-regen": 4, "r1-train": 2}.get(name, 1))
        world.settle()
    return world


def test_delete_intermediate_starts_one_prune_job_in_the_pass_that_succeeds(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = succeeded(sim, make_spec, "DeleteIntermediate")

    assert world.status["phase"] == "Succeeded"
    assert world.created[-1] == "r1-prune"
    job = world.manifests[("Job", "r1-prune")]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--policy") + 1] == "DeleteIntermediate"
    assert job["metadata"]["ownerReferences"][0]["uid"] == world.body["metadata"]["uid"]
    condition = world.condition("CleanedUp")
    assert condition["status"] == "Unknown" and condition["reason"] == "CleanupStarted"
    assert any(ref["name"] == "r1-prune" for ref in world.status["children"])
    assert ("CleanupStarted", condition["message"]) in world.events()


def test_a_finished_prune_job_is_recorded_as_artifacts_deleted_and_never_recreated(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = succeeded(sim, make_spec, "DeleteIntermediate")
    world.finish(
        "r1-prune", result={"stage": "cleanup", "ok": True, "message": "deleted 7 objects"}
    )
    world.settle()

    condition = world.condition("CleanedUp")
    assert condition["status"] == "True" and condition["reason"] == "ArtifactsDeleted"
    assert "deleted 7 objects" in condition["message"]
    world.children.clear()  # even with the Job gone (TTL), nothing is created again
    assert world.step().actions == ()
    assert world.created.count("r1-prune") == 1
    assert world.status["phase"] == "Succeeded"


def test_a_failed_prune_job_warns_and_keeps_the_run_succeeded(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = succeeded(sim, make_spec, "DeleteIntermediate")
    world.finish("r1-prune", ok=False, exit_code=2, result={"message": "access refused"})
    world.settle()

    condition = world.condition("CleanedUp")
    assert condition["status"] == "False" and condition["reason"] == "CleanupFailed"
    assert "access refused" in condition["message"]
    assert world.status["phase"] == "Succeeded"
    assert world.plans[-1].actions == ()
    assert any(
        e.type == "Warning" and e.reason == "CleanupFailed" for p in world.plans for e in p.events
    )


def test_a_prune_job_lost_before_it_finished_is_reported_not_recreated(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = succeeded(sim, make_spec, "DeleteIntermediate")
    world.children.pop(("Job", "r1-prune"))
    world.step()

    assert world.condition("CleanedUp")["reason"] == "CleanupFailed"
    assert "disappeared" in world.condition("CleanedUp")["message"]
    assert world.created.count("r1-prune") == 1


def test_choosing_delete_intermediate_after_success_prunes_then_and_retries_a_refused_job(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = succeeded(sim, make_spec, "Retain")
    world.body["spec"]["storage"]["cleanupPolicy"] = "DeleteIntermediate"
    quota = CreateFailure("Job", "r1-prune", "exceeded quota", permanent=False)
    observed = replace(world.observed(), create_failures=(quota,))
    result = plan(PlanInput(world.body, observed, world.pools, world.settings, world.now))

    assert [a for a in result.actions if isinstance(a, CreateChild)] == []
    assert result.status.condition(ConditionType.CLEANED_UP) is None  # the next pass creates it
    assert [e.reason for e in result.events] == ["CleanupFailed"]


def test_retain_and_delete_start_no_job_after_success(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    for policy in ("Retain", "Delete"):
        world = succeeded(sim, make_spec, policy)
        assert "r1-prune" not in world.created
        assert world.condition("CleanedUp") is None
