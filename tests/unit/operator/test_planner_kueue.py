"""Kueue in the planner: a queued child starts suspended and only Kueue unsuspends it; the
operator never writes a queued child's `suspend`; the run shows why it waits in Kueue's words.

The unit tests' pools queue training (`rtx-pro-6000` has `kueue.x-k8s.io/queue-name`), not
regeneration (`b200`); the simulated Kueue admits at once while `world.quota_free`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dflash_operator.plan.actions import CreateChild, SetSuspend, SetWorkloadActive

PASS = {"verdict": "pass"}


def to_training(world: Any) -> None:
    world.step()
    for name, result in (
        ("r1-regen", {"samples": 10}),
        ("r1-audit-completions", PASS),
        ("r1-tokenize", {}),
        ("r1-audit-tokens", PASS),
    ):
        world.finish(name, result=result, pods=4 if name == "r1-regen" else 1)
        world.settle()


def created(world: Any, name: str) -> CreateChild:
    for actions in world.actions:
        for action in actions:
            if isinstance(action, CreateChild) and action.name == name:
                return action
    raise AssertionError(f"{name} was never created")


def test_a_queued_child_is_created_suspended_and_an_unqueued_one_is_not(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    to_training(world)
    train = created(world, "r1-train").manifest
    assert train["spec"]["runPolicy"]["suspend"] is True
    assert train["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    assert created(world, "r1-regen").manifest["spec"]["suspend"] is False


def test_a_child_waiting_for_quota_is_never_written_and_the_run_says_why(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.quota_free = False
    world.quota_message = (
        "couldn't assign flavors to pod set master: insufficient unused quota for "
        "nvidia.com/gpu in flavor rtx-pro-6000, 4 more needed"
    )
    to_training(world)
    for _ in range(20):  # resyncs while it waits
        world.step()
    since_created = [a for actions in world.actions[-20:] for a in actions]
    assert not any(isinstance(a, SetSuspend | SetWorkloadActive) for a in since_created)
    assert world.child("r1-train").suspended

    admitted = world.condition("Admitted")
    assert admitted["status"] == "False" and admitted["reason"] == "Queued"
    assert "waits in Kueue LocalQueue gpu-queue" in admitted["message"]
    assert "4 more needed" in admitted["message"]
    assert world.status["phase"] == "Training"
    assert world.status["progress"] == "train queued"
    assert "4 more needed" in world.status["message"]
    assert [e for e in world.events() if e[0] == "Queued"] == [("Queued", admitted["message"])]

    world.quota_free = True  # the other run finished
    world.step()
    assert not world.child("r1-train").suspended
    admitted = world.condition("Admitted")
    assert admitted["status"] == "True" and admitted["reason"] == "Admitted"
    assert "ClusterQueue gpu-cq" in admitted["message"]
    assert world.status["progress"] != "train queued"


def test_suspend_and_resume_of_a_queued_child_go_through_its_workload(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    to_training(world)
    assert not world.child("r1-train").suspended

    def suspend(value: bool) -> Callable[[dict[str, Any]], None]:
        return lambda body: body["spec"].__setitem__("suspend", value)

    world.step(suspend(True))
    assert world.actions[-1] == (SetWorkloadActive("job-r1-train-abcde", False),)
    world.step()
    assert world.child("r1-train").suspended  # Kueue stopped it
    assert world.status["phase"] == "Suspended"
    assert world.step().actions == ()

    world.step(suspend(False))
    assert world.actions[-1] == (SetWorkloadActive("job-r1-train-abcde", True),)
    world.step()
    assert not world.child("r1-train").suspended
    assert world.status["phase"] == "Training"
    assert not any(isinstance(a, SetSuspend) for actions in world.actions for a in actions)
