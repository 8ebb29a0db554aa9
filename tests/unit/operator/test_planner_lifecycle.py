"""Failures, suspend/resume, terminal states, crash safety and invalid runs in the planner."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from dflash_operator.api.constants import Stage
from dflash_operator.plan.actions import CreateChild, DeleteChild, SetWorkloadActive
from dflash_operator.plan.observed import CreateFailure, PodView, Termination
from dflash_operator.pools import parse_pools

REGEN = {"samples": 10}
PASS = {"verdict": "pass"}


def training(sim: Callable[..., Any], **kwargs: Any) -> Any:
    world = sim(**kwargs)
    world.step()
    world.finish_data_stages()
    assert world.status["phase"] == "Training"
    return world


def suspend(value: bool) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        body["spec"]["suspend"] = value
        body["metadata"]["generation"] += 1

    return change


# --- failures --------------------------------------------------------------------------------------
def test_training_that_exhausts_its_restarts_fails_the_run_with_the_last_pod_failure(
    sim: Callable[..., Any],
) -> None:
    world = training(sim)
    job = world.child("r1-train")
    world.children[("PyTorchJob", "r1-train")] = replace(
        job,
        finished=replace(
            job.finished,
            done=True,
            ok=False,
            message="PyTorchJobFailed: Job r1-train has failed because it has reached the specified backoff limit",
        ),
    )
    crash = Termination(
        exit_code=1, reason="Error", message="CUDA error: out of memory", finished_at=world.now
    )
    world.pods.append(
        PodView(
            name="r1-train-master-0",
            uid="p1",
            owner_name="r1-train",
            owner_uid=world.child("r1-train").uid,
            phase="Running",
            restarts=3,
            last_failure=crash,
            replica_type="master",
        )
    )
    world.step()

    failed = world.condition("Failed")
    assert world.status["phase"] == "Failed"
    assert failed["reason"] == "RetriesExhausted"
    assert "train failed 4 times (limit 3)" in failed["message"]
    assert "pod r1-train-master-0 exited 1 (Error): CUDA error: out of memory" in failed["message"]
    assert world.condition("Trained")["status"] == "False"
    assert ("RetriesExhausted", failed["message"]) in world.events()


def test_regeneration_failure_names_the_failed_shards(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    world.finish(
        "r1-regen",
        ok=False,
        result={"stage": "regenerate", "ok": False, "message": "vLLM engine died"},
        message="FailedIndexes: Job has failed indexes",
    )
    world.children[("Job", "r1-regen")] = replace(world.child("r1-regen"), failed_indexes="1,3")
    world.step()

    message = world.condition("Failed")["message"]
    assert "shards 1,3 failed" in message
    assert "vLLM engine died" in message
    assert "dflash.dev/retry" in message


def test_bad_input_fails_the_stage_without_calling_it_exhausted_retries(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.finish(
        "r1-regen",
        ok=False,
        exit_code=2,
        message="PodFailurePolicy: Container regenerate exited with 2",
        result={"message": "sources.yaml: unknown format"},
    )
    world.step()

    assert world.condition("Failed")["reason"] == "StageFailed"
    assert "regen failed on attempt 1" in world.condition("Failed")["message"]


def test_a_failed_run_is_terminal_and_creates_nothing_more(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    world.finish("r1-regen", ok=False)
    world.step()
    world.children.clear()
    again = world.step()

    assert again.actions == () and again.events == ()
    assert world.status["phase"] == "Failed"


def test_a_retry_of_a_failed_run_starts_a_new_attempt_of_the_failed_stage(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.finish("r1-regen", ok=False)
    world.step()
    world.step(lambda body: body["metadata"]["annotations"].update({"dflash.dev/retry": "now"}))

    assert world.created == ["r1-regen", "r1-regen-2"]
    assert world.status["phase"] == "Regenerating"
    assert world.condition("Failed")["status"] == "False"
    assert "completionTime" not in world.status


def test_a_retry_waits_until_the_earlier_attempts_pods_have_stopped(
    sim: Callable[..., Any],
) -> None:
    """Two writers never share the stage's S3 prefix: attempt 2 starts only once the failed
    attempt's last pod (still terminating, still running its process) has stopped."""
    world = sim()
    world.step()
    world.finish("r1-regen", ok=False)
    world.step()
    old = world.child("r1-regen")
    lingering = PodView(
        name="r1-regen-1-xyz", uid="p9", owner_name="r1-regen", owner_uid=old.uid,
        stage=Stage.REGEN, attempt=1, index=1, phase="Running",
    )  # fmt: skip
    world.pods.append(lingering)
    retry = {"dflash.dev/retry": "now"}
    world.step(lambda body: body["metadata"]["annotations"].update(retry))
    world.step()
    assert world.created == ["r1-regen"]
    assert (
        "waiting for 1 pod(s) of an earlier attempt to stop (r1-regen-1-xyz)"
        in (world.status["message"])
    )
    world.pods.remove(lingering)
    world.pods.append(replace(lingering, phase="Failed"))
    world.step()
    assert world.created == ["r1-regen", "r1-regen-2"]


def test_a_succeeded_run_ignores_retries_and_never_recreates_children(
    sim: Callable[..., Any],
) -> None:
    world = training(sim)
    world.finish("r1-train", result={"finalUri": "s3://a/final"}, pods=2)
    world.settle()
    world.finish("r1-eval", result={"acceptanceLength": 5.0})
    world.settle()
    assert world.status["phase"] == "Succeeded"
    world.children.clear()
    world.step(lambda body: body["metadata"]["annotations"].update({"dflash.dev/retry": "train"}))

    assert world.plans[-1].actions == ()
    assert world.status["phase"] == "Succeeded"
    assert world.created.count("r1-train") == 1


def test_finished_children_are_deleted_once_the_ttl_expires(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = training(sim, spec=make_spec(ttlSecondsAfterFinished=600))
    world.finish("r1-train", result={"finalUri": "s3://a/final"}, pods=2)
    world.settle()
    world.finish("r1-eval", result={"acceptanceLength": 5.0})
    world.settle()
    waiting = world.step()
    assert waiting.actions == ()
    assert 590 < (waiting.requeue_after or 0) <= 600

    world.now += timedelta(seconds=601)
    world.step()
    deleted = {a.name for a in world.actions[-1] if isinstance(a, DeleteChild)}
    assert deleted == {
        "r1-regen",
        "r1-audit-completions",
        "r1-tokenize",
        "r1-audit-tokens",
        "r1-train",
        "r1-eval",
    }
    assert world.status["phase"] == "Succeeded"
    assert world.step().actions == ()


# --- suspend -----------------------------------------------------------------------------------------
def test_suspending_mid_training_deactivates_the_queued_pytorchjobs_workload(
    sim: Callable[..., Any],
) -> None:
    """The training pool is queued (Kueue): spec.suspend deactivates the Workload, and
    Kueue stops the PyTorchJob; the operator never writes the child's own `suspend`."""
    world = training(sim)
    result = world.step(suspend(True))
    assert world.plans[-1] is result

    assert world.actions[-1] == (SetWorkloadActive("job-r1-train-abcde", False),)
    assert world.child("r1-train").suspended
    assert world.status["phase"] == "Suspended"
    assert world.condition("Suspended")["status"] == "True"
    assert "train is stopped" in world.condition("Suspended")["message"]
    assert any(e.reason == "Suspended" for e in result.events)


def test_resuming_continues_the_same_training_child_from_its_checkpoint(
    sim: Callable[..., Any],
) -> None:
    world = training(sim)
    world.step(suspend(True))
    world.body["status"]["checkpoint"] = {"uri": "s3://a/checkpoints/step-000000400", "step": 400}
    result = world.step(suspend(False))

    assert not world.child("r1-train").suspended
    assert world.status["phase"] == "Training"
    assert world.created.count("r1-train") == 1
    assert world.condition("Suspended")["reason"] == "Resumed"
    reasons = [e.reason for e in result.events]
    assert "TrainingResumed" in reasons
    assert any("step 400" in e.message for e in result.events)


def test_a_run_suspended_before_it_starts_creates_no_child(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = sim(spec=make_spec(suspend=True))
    world.step()

    assert world.created == []
    assert world.status["phase"] == "Suspended"
    world.step(suspend(False))
    assert world.created == ["r1-regen"]


def test_a_run_suspended_between_stages_starts_the_next_stage_only_on_resume(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.step(suspend(True))
    world.finish("r1-regen", result=REGEN, pods=4)
    world.step()
    assert "r1-audit-completions" not in world.created
    assert world.status["phase"] == "Suspended"
    world.step(suspend(False))
    assert world.created[-1] == "r1-audit-completions"


# --- crash safety ------------------------------------------------------------------------------------
def test_a_child_created_but_not_recorded_is_adopted_not_duplicated(
    sim: Callable[..., Any], make_body: Callable[..., Any], pools: Any
) -> None:
    world = sim()
    world.step()
    # The operator died after creating the Job and before writing status: forget the status.
    world.body["status"] = {}
    result = world.step()

    assert not any(isinstance(a, CreateChild) for a in result.actions)
    assert world.created == ["r1-regen"]
    assert world.status["attempts"] == {"regen": 1}
    assert world.status["phase"] == "Regenerating"


def test_a_child_deleted_behind_the_operators_back_is_recreated_with_a_warning(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    old_uid = world.child("r1-regen").uid
    del world.children[("Job", "r1-regen")]
    result = world.step()

    assert world.created == ["r1-regen", "r1-regen"]
    assert world.child("r1-regen").uid != old_uid
    assert any(e.reason == "ChildLost" and e.type == "Warning" for e in result.events)


def test_children_of_an_earlier_run_with_the_same_name_are_ignored(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    world.children = {k: replace(v, owner_uid="an-older-run") for k, v in world.children.items()}
    world.body["status"] = {}
    world.step()

    assert any(isinstance(a, CreateChild) and a.name == "r1-regen" for a in world.actions[-1])


@pytest.mark.parametrize(("permanent", "phase"), [(True, "Failed"), (False, "Regenerating")])
def test_a_child_that_cannot_be_created_fails_the_run_only_when_retrying_cannot_help(
    sim: Callable[..., Any], make_body: Callable[..., Any], pools: Any, permanent: bool, phase: str
) -> None:
    from dflash_operator.plan.observed import Observed
    from dflash_operator.plan.planner import PlanInput, plan
    from dflash_operator.plan.stages import PlanSettings

    failure = CreateFailure(
        "Job", "r1-regen", 'Job.batch "r1-regen" is invalid: spec.completions', permanent=permanent
    )
    world = sim()
    result = plan(
        PlanInput(
            make_body(), Observed(create_failures=(failure,)), pools, PlanSettings(), world.now
        )
    )

    assert result.status.phase is not None and result.status.phase.value == phase
    assert not any(isinstance(a, CreateChild) and a.name == "r1-regen" for a in result.actions)
    assert any(e.reason == "ChildCreateFailed" for e in result.events)


# --- invalid runs --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "reason", "words"),
    [
        (
            {"training": {"nodePool": "h100"}},
            "UnknownNodePool",
            ["spec.training.nodePool=h100", "b200, cpu, rtx-pro-6000"],
        ),
        (
            {"regeneration": {"nodePool": "gpu-xl"}},
            "UnknownNodePool",
            ["spec.regeneration.nodePool=gpu-xl"],
        ),
        (
            {"training": {"gpusPerNode": 8}},
            "InvalidSpec",
            ["spec.training.gpusPerNode=8", "rtx-pro-6000 has 4 GPUs per node"],
        ),
        (
            {"regeneration": {"tensorParallel": 3}},
            "InvalidSpec",
            ["spec.regeneration.tensorParallel=3", "1, 2, 4 or 8", "b200 has 8 GPUs"],
        ),
        ({"training": {"nodes": 0}}, "InvalidSpec", ["spec.training.nodes", "0"]),
        (
            {"storage": {"bucket": "artifacts", "secretAccessKey": "hunter2"}},
            "InvalidSpec",
            ["secretAccessKey is not accepted"],
        ),
    ],
)
def test_a_run_that_does_not_fit_fails_at_once_with_the_reason_and_no_child(
    sim: Callable[..., Any],
    make_spec: Callable[..., Any],
    overrides: dict[str, Any],
    reason: str,
    words: list[str],
) -> None:
    world = sim(spec=make_spec(**overrides))
    result = world.step()

    assert world.created == [] and result.actions == ()
    assert world.status["phase"] == "Failed"
    failed = world.condition("Failed")
    assert failed["reason"] == reason
    for word in words:
        assert word in failed["message"]
    assert "hunter2" not in str(world.status)
    assert any(e.type == "Warning" and e.reason == reason for e in result.events)


def test_a_training_job_on_a_cpu_pool_requests_no_gpus(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = training(
        sim, spec=make_spec(training={"nodes": 2, "nodePool": "cpu", "gpusPerNode": 2})
    )
    job = world.manifests[("PyTorchJob", "r1-train")]
    assert job["spec"]["nprocPerNode"] == "2"
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    assert "resources" not in container or "nvidia.com/gpu" not in container["resources"].get(
        "limits", {}
    )


def test_a_pod_that_died_in_place_is_reported_while_training_runs(sim: Callable[..., Any]) -> None:
    world = training(sim)
    crash = Termination(exit_code=137, reason="OOMKilled", finished_at=world.now)
    world.pods.append(
        PodView(
            name="r1-train-worker-0",
            uid="p2",
            owner_name="r1-train",
            owner_uid=world.child("r1-train").uid,
            phase="Running",
            restarts=1,
            last_failure=crash,
        )
    )
    world.step()
    assert "1 restarts so far" in world.condition("Trained")["message"]


def test_the_last_crash_is_reported_even_after_its_pod_was_deleted(sim: Callable[..., Any]) -> None:
    world = training(sim)
    crash = Termination(
        exit_code=1, reason="Error", message="NCCL watchdog timeout", finished_at=world.now
    )
    world.pods.append(
        PodView(
            name="r1-train-master-0",
            uid="p1",
            owner_name="r1-train",
            owner_uid=world.child("r1-train").uid,
            phase="Running",
            restarts=2,
            last_failure=crash,
        )
    )
    world.step()
    world.pods.clear()  # cleanPodPolicy Running: the crash-looping pod is deleted with the job
    world.step()
    assert "NCCL watchdog timeout" in world.condition("Trained")["message"]
    job = world.child("r1-train")
    world.children[("PyTorchJob", "r1-train")] = replace(
        job,
        finished=replace(
            job.finished, done=True, ok=False, message="PyTorchJobFailed: backoff limit"
        ),
    )
    world.step()

    assert (
        "pod r1-train-master-0 exited 1 (Error): NCCL watchdog timeout"
        in world.condition("Failed")["message"]
    )


def test_a_training_job_adopted_after_a_crash_gets_its_identity_recorded(
    sim: Callable[..., Any],
) -> None:
    world = training(sim)
    status = world.body["status"]
    status["children"] = [
        c for c in status["children"] if c["kind"] not in ("ServiceAccount", "Role", "RoleBinding")
    ]
    world.step()

    recorded = {(c["kind"], c["name"]) for c in world.status["children"]}
    assert {
        ("ServiceAccount", "r1-trainer"),
        ("Role", "r1-trainer"),
        ("RoleBinding", "r1-trainer"),
    } <= recorded
    assert world.step().actions == ()


# --- identity ---------------------------------------------------------------------------------------
def test_pods_of_a_namesake_child_are_never_read(sim: Callable[..., Any]) -> None:
    """A run re-created under the same name: its new `r1-regen` Job takes the old Job's name
    while the old Job's pods (finished shards, a training crash) may still be terminating, or
    be orphans. They are matched by their controller's UID, so none of them counts."""
    world = sim()
    world.step()
    assert world.status["phase"] == "Regenerating"
    finished = Termination(0, "Completed", json.dumps(REGEN))
    for index, owner_uid in enumerate(("uid-of-the-deleted-run-regen", None)):
        world.pods.append(
            PodView(
                name=f"r1-regen-{index}-old", uid=f"old-{index}", owner_name="r1-regen",
                owner_uid=owner_uid, stage=Stage.REGEN, index=index, phase="Succeeded",
                terminated=finished,
            )
        )  # fmt: skip
    world.step()
    assert world.status["stages"]["regeneration"]["shardsDone"] == 0
    assert world.status["progress"].startswith("regen 0/")


# --- the pools change under a running run -----------------------------------------------------------
def test_a_pools_change_never_fails_a_running_stage_only_a_stage_that_cannot_start(
    sim: Callable[..., Any],
) -> None:
    """The chart's pools change (the operator restarts with them) while regeneration runs on
    b200, and the training pool is gone: regeneration runs on and its results are kept; the
    run fails when training is about to start, naming the stage and the pool."""
    world = sim()
    world.step()
    assert world.status["phase"] == "Regenerating"
    raw = world.pools.model_dump(by_alias=True, exclude_none=True)
    del raw["nodePools"]["rtx-pro-6000"]  # the training pool is gone from the chart values
    raw["defaults"]["training"] = "b200"
    world.body["spec"].setdefault("training", {})["nodePool"] = "rtx-pro-6000"  # named
    world.pools = parse_pools(raw)
    world.step()
    assert world.status["phase"] == "Regenerating"
    assert world.condition("Failed") is None or world.condition("Failed")["status"] != "True"

    world.finish("r1-regen", result=REGEN, pods=4)
    world.settle()
    for name in ("r1-audit-completions", "r1-tokenize", "r1-audit-tokens"):
        world.finish(name, result=PASS if "audit" in name else {})
        world.settle()
    failed = world.condition("Failed")
    assert world.status["phase"] == "Failed" and failed["reason"] == "UnknownNodePool"
    assert failed["message"].startswith("train cannot start: ")
    assert "rtx-pro-6000" in failed["message"]
    assert "r1-train" not in world.created
    assert world.status["stages"]["regeneration"]["shardsDone"] == 4  # kept


def test_a_run_that_does_not_fit_before_anything_started_fails_at_once(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = sim(spec=make_spec(training={"nodes": 2, "gpusPerNode": 2, "nodePool": "nope"}))
    world.step()
    assert world.status["phase"] == "Failed"
    assert world.created == []


# --- deadlines ---------------------------------------------------------------------------------------
def test_stage_deadlines_reach_the_jobs_and_the_pytorchjob(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    spec = make_spec()
    spec["regeneration"]["activeDeadlineSeconds"] = 7200
    spec.setdefault("training", {})["activeDeadlineSeconds"] = 86400
    world = training(sim, spec=spec)
    assert world.manifests[("Job", "r1-regen")]["spec"]["activeDeadlineSeconds"] == 7200
    assert "activeDeadlineSeconds" not in world.manifests[("Job", "r1-tokenize")]["spec"]
    run_policy = world.manifests[("PyTorchJob", "r1-train")]["spec"]["runPolicy"]
    assert run_policy["activeDeadlineSeconds"] == 86400


def test_the_run_deadline_fails_the_run_naming_the_stage_and_stops_its_pods(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = sim(spec=make_spec(activeDeadlineSeconds=3600))
    plan = world.step()
    assert world.status["phase"] == "Regenerating"
    assert plan.requeue_after is not None and 3590 < plan.requeue_after <= 3600
    world.now += timedelta(seconds=3600)
    world.step()
    failed = world.condition("Failed")
    assert world.status["phase"] == "Failed" and failed["reason"] == "DeadlineExceeded"
    assert "activeDeadlineSeconds=3600" in failed["message"]
    assert "in stage regen" in failed["message"]
    assert world.actions[-1] == (DeleteChild("Job", "r1-regen"),)
    assert ("Job", "r1-regen") not in world.children
    assert world.step().actions == ()
