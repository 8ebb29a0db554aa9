"""GPU-hour accounting (requested GPUs x pod wall time, retries included, never forgotten when
pods go, written at most every 5 minutes while only time passes) and the GPU-hour budget that
suspends a run and resumes it when raised."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from dflash_operator.plan.actions import SetSuspend
from dflash_operator.plan.observed import PodView, Termination

from .conftest import RUN_UID


def gpu_pods(world: Any, child: str, count: int, gpus: float, hours: float) -> list[PodView]:
    view = world.child(child)
    pods = [
        PodView(
            name=f"{child}-{i}-gpu",
            uid=f"gpu-{child}-{i}",
            owner_name=child,
            owner_uid=view.uid,
            run_uid=RUN_UID,
            stage=view.stage,
            attempt=view.attempt,
            index=i,
            phase="Running",
            gpus=gpus,
            started_at=world.now - timedelta(hours=hours),
        )
        for i in range(count)
    ]
    world.pods.extend(pods)
    return pods


def test_hours_are_gpus_times_wall_time_per_stage_and_attempt(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    gpu_pods(world, "r1-regen", count=2, gpus=2, hours=1.0)
    world.step()
    hours = world.status["gpuHours"]
    assert hours["byAttempt"] == {"regen-1": 4.0}
    assert hours["byStage"] == {"regen": 4.0}
    assert hours["total"] == 4.0


def test_running_time_is_written_every_five_minutes_not_every_pass(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    gpu_pods(world, "r1-regen", count=1, gpus=8, hours=1.0)
    world.step()
    first = world.status["gpuHours"]["total"]
    world.now += timedelta(seconds=120)
    world.step()
    assert world.status["gpuHours"]["total"] == first  # no write for time alone
    world.now += timedelta(seconds=300)
    world.step()
    assert world.status["gpuHours"]["total"] > first


def test_hours_of_pods_that_are_gone_are_kept(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    pods = gpu_pods(world, "r1-regen", count=2, gpus=1, hours=2.0)
    ended = Termination(exit_code=0, finished_at=world.now)
    world.pods[:] = [replace(p, phase="Succeeded", terminated=ended) for p in pods]
    world.step()
    assert world.status["gpuHours"]["total"] == 4.0
    world.pods.clear()  # a TTL, a retry: the pods are gone
    world.now += timedelta(hours=1)
    world.step()
    assert world.status["gpuHours"]["total"] == 4.0


def test_a_run_out_of_budget_is_suspended_and_resumes_when_the_budget_grows(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=make_spec(budget={"maxGpuHours": 3}))
    world.step()
    gpu_pods(world, "r1-regen", count=2, gpus=2, hours=1.0)  # 4 GPU-hours
    world.step()

    assert world.status["phase"] == "Suspended"
    suspended = world.condition("Suspended")
    assert suspended["reason"] == "BudgetExceeded"
    assert "used 4.00 of its 3 GPU-hours" in suspended["message"]
    assert "dflash.dev/extra-gpu-hours" in suspended["message"]
    assert world.condition("BudgetExceeded")["status"] == "True"
    suspends = [a for step in world.actions for a in step if isinstance(a, SetSuspend)]
    assert suspends == [SetSuspend("Job", "r1-regen", True)]
    assert ("BudgetExceeded", "Warning") in [
        (e.reason, e.type) for p in world.plans for e in p.events
    ]

    world.step(
        lambda body: body["metadata"]["annotations"].update({"dflash.dev/extra-gpu-hours": "10"})
    )
    assert world.status["phase"] == "Regenerating"
    assert world.condition("Suspended")["status"] == "False"
    assert world.condition("BudgetExceeded")["status"] == "False"
    assert world.child("r1-regen").suspended is False


def test_a_run_within_budget_says_how_much_it_used(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=make_spec(budget={"maxGpuHours": 100}))
    world.step()
    gpu_pods(world, "r1-regen", count=1, gpus=1, hours=1.0)
    world.step()
    within = world.condition("BudgetExceeded")
    assert within["status"] == "False" and "used 1.00 of its 100 GPU-hours" in within["message"]
    assert world.status["phase"] == "Regenerating"


def test_a_wrong_extra_gpu_hours_annotation_is_named_not_taken(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=make_spec(budget={"maxGpuHours": 3}))
    world.step()
    gpu_pods(world, "r1-regen", count=2, gpus=2, hours=1.0)
    world.step(
        lambda body: body["metadata"]["annotations"].update({"dflash.dev/extra-gpu-hours": "lots"})
    )
    assert world.status["phase"] == "Suspended"
    said = world.condition("BudgetExceeded")["message"]
    assert "dflash.dev/extra-gpu-hours='lots' is not accepted: a number of GPU-hours" in said


def test_a_pool_resource_that_is_not_a_quantity_is_named() -> None:
    import copy

    import pytest
    from dflash_operator.pools import PoolsError, parse_pools

    from .conftest import POOLS

    pools = copy.deepcopy(POOLS)
    pools["nodePools"]["cpu"]["resources"] = {"default": {"requests": {"memory": "lots"}}}
    with pytest.raises(PoolsError, match=r"requests\.memory='lots' is not a Kubernetes quantity"):
        parse_pools(pools)
