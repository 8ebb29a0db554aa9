"""The training backend in the planner: `auto` takes TrainJob where the cluster serves it and
PyTorchJob otherwise; the choice is recorded once and never changes for a run in flight; a
backend the cluster does not serve is named with how to install it; every guarantee of the
PyTorchJob path holds for a TrainJob (restarts, Kueue's suspend, deadlines, ttl, the monitor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from dflash_operator.api.spec_training import Launcher
from dflash_operator.api.status import DFlashRunStatus
from dflash_operator.api.validation import parse_spec
from dflash_operator.plan.actions import (
    CreateChild,
    DeleteChild,
    SetDeadline,
    SetSuspend,
    SetWorkloadActive,
)
from dflash_operator.plan.launcher import LauncherChoice, choose_launcher
from dflash_operator.plan.observed import Finished, Observed, PodView
from dflash_operator.plan.stages import PlanSettings

BOTH = frozenset({"TrainJob", "PyTorchJob"})
TRAINER_ONLY = frozenset({"TrainJob"})
V1_ONLY = frozenset({"PyTorchJob"})
NONE: frozenset[str] = frozenset()


def world_at_training(sim: Callable[..., Any], served: frozenset[str] | None, **spec: Any) -> Any:
    world = sim(**spec)
    world.served_kinds = served
    world.step()
    world.finish_data_stages()
    return world


def trains(make_spec: Callable[..., Any], **training: Any) -> dict[str, Any]:
    return {"spec": make_spec(training={"nodes": 2, **training})}


def creates(world: Any) -> list[CreateChild]:
    """What the operator asked to create (some refused: see `world.created`)."""
    return [a for actions in world.actions for a in actions if isinstance(a, CreateChild)]


def created_kinds(world: Any) -> set[str]:
    return {kind for kind, _name in world.manifests}


@pytest.mark.parametrize(
    ("served", "kind"),
    [(BOTH, "TrainJob"), (TRAINER_ONLY, "TrainJob"), (V1_ONLY, "PyTorchJob")],
    ids=["both", "trainer-v2-only", "training-operator-only"],
)
def test_auto_takes_trainjob_where_it_is_served_and_pytorchjob_otherwise(
    sim: Callable[..., Any], served: frozenset[str], kind: str
) -> None:
    world = world_at_training(sim, served)
    assert world.child("r1-train").kind == kind
    assert world.status["launcher"] == kind.lower()


def test_the_choice_is_recorded_and_survives_the_cluster_changing(
    sim: Callable[..., Any],
) -> None:
    world = world_at_training(sim, V1_ONLY)
    assert world.status["launcher"] == "pytorchjob"
    world.served_kinds = BOTH  # Trainer v2 installed while the run trains
    world.finish("r1-train", ok=False)  # and the PyTorchJob failed for good
    world.step()
    assert "TrainJob" not in created_kinds(world)
    assert world.status["launcher"] == "pytorchjob"


def test_a_run_of_an_older_operator_keeps_its_pytorchjob_across_the_upgrade(
    sim: Callable[..., Any],
) -> None:
    world = world_at_training(sim, V1_ONLY)
    del world.body["status"]["launcher"]  # what an operator without the field wrote
    world.served_kinds = BOTH
    world.step()
    assert world.status["launcher"] == "pytorchjob"
    assert world.created.count("r1-train") == 1  # nothing re-created
    assert "TrainJob" not in created_kinds(world)


def test_an_explicit_launcher_wins_over_auto(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = world_at_training(sim, BOTH, **trains(make_spec, launcher="pytorchjob"))
    assert world.child("r1-train").kind == "PyTorchJob"


def test_the_operators_default_applies_when_the_run_names_no_launcher(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.settings = PlanSettings(default_launcher=Launcher.PYTORCHJOB)
    world.served_kinds = BOTH
    world.step()
    world.finish_data_stages()
    assert world.child("r1-train").kind == "PyTorchJob"


def test_a_backend_the_cluster_does_not_serve_is_named_with_how_to_install_it(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = world_at_training(sim, V1_ONLY, **trains(make_spec, launcher="trainjob"))
    assert not [c for c in creates(world) if c.kind == "TrainJob"]
    trained = world.condition("Trained")
    assert (trained["status"], trained["reason"]) == ("False", "TrainingApiMissing")
    assert "launcher trainjob (spec.training.launcher) needs TrainJob " in trained["message"]
    assert "(trainer.kubeflow.org/v1alpha1)" in trained["message"]
    assert "install Kubeflow Trainer v2 (>= v2.3" in trained["message"]
    assert world.status["phase"] == "Training" and world.status["message"] == trained["message"]
    assert ("TrainingApiMissing", trained["message"]) in world.events()
    assert world.plans[-1].requeue_after is not None  # looked at again: it never hangs
    assert "launcher" not in world.status  # nothing decided yet

    world.served_kinds = BOTH  # the platform installed the Trainer
    world.step()
    assert world.child("r1-train").kind == "TrainJob"
    assert world.status["launcher"] == "trainjob"


def test_auto_on_a_cluster_with_neither_backend_names_both(sim: Callable[..., Any]) -> None:
    world = world_at_training(sim, NONE)
    message = world.condition("Trained")["message"]
    assert "launcher auto (unset, so the operator's default" in message
    assert "TrainJob (trainer.kubeflow.org/v1alpha1) or PyTorchJob (kubeflow.org/v1)" in message
    assert "Kubeflow Trainer v2" in message and "training-operator v1" in message


def test_the_trainjob_is_created_after_its_runtime_is_looked_up(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = sim(**trains(make_spec, runtimeRef="torch-distributed"))
    world.served_kinds = BOTH
    world.absent.add(("ClusterTrainingRuntime", "torch-distributed"))
    world.step()
    world.finish_data_stages()
    assert "TrainJob" not in created_kinds(world)
    trained = world.condition("Trained")
    assert trained["reason"] == "ObjectMissing"
    assert "ClusterTrainingRuntime torch-distributed" in trained["message"]
    assert "spec.training.runtimeRef" in trained["message"]
    assert " in namespace " not in trained["message"]  # cluster-scoped

    world.absent.clear()
    world.step()
    assert world.child("r1-train").kind == "TrainJob"


def trainjob_world(sim: Callable[..., Any], **spec: Any) -> Any:
    world = world_at_training(sim, BOTH, **spec)
    assert world.child("r1-train").kind == "TrainJob"
    return world


def test_a_failed_trainjob_is_followed_by_the_next_attempt_until_max_restarts(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = trainjob_world(sim, **trains(make_spec, maxRestarts=2))
    for attempt, name in ((2, "r1-train"), (3, "r1-train-2")):
        world.finish(name, ok=False, message="JobSetFailed: jobset r1 failed")
        world.settle()
        assert world.status["attempts"]["train"] == attempt
        restarted = world.condition("Trained")
        assert restarted["reason"] == "WorkloadRestarted"
        assert f"TrainJob {name} failed (JobSetFailed: jobset r1 failed)" in restarted["message"]
        assert f"restart {attempt - 1} of 2" in restarted["message"]
        assert world.status["phase"] == "Training"
    world.finish("r1-train-3", ok=False, message="JobSetFailed: jobset r1 failed")
    world.settle()
    failed = world.condition("Failed")
    assert (
        failed["reason"] == "RetriesExhausted"
        and "train failed 3 times (limit 2)" in (failed["message"])
    )
    assert [c.name for c in creates(world) if c.kind == "TrainJob"] == [
        "r1-train", "r1-train-2", "r1-train-3",
    ]  # fmt: skip


def test_a_trainjob_past_its_deadline_is_never_restarted(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = trainjob_world(sim, **trains(make_spec, activeDeadlineSeconds=60))
    job = world.child("r1-train")
    world.children[("TrainJob", "r1-train")] = replace(
        job, finished=Finished(True, False, "DeadlineExceeded: past 60 s", final=True)
    )
    world.settle()
    assert world.status["phase"] == "Failed"
    assert "r1-train-2" not in world.created


def test_a_deleted_trainjob_is_recreated(sim: Callable[..., Any]) -> None:
    world = trainjob_world(sim)
    old_uid = world.child("r1-train").uid
    del world.children[("TrainJob", "r1-train")]
    result = world.step()
    assert world.child("r1-train").uid != old_uid
    assert any(e.reason == "ChildLost" and e.type == "Warning" for e in result.events)


def test_kueue_owns_a_queued_trainjobs_suspend(sim: Callable[..., Any]) -> None:
    world = trainjob_world(sim)
    created = next(c for c in creates(world) if c.kind == "TrainJob").manifest
    assert created["spec"]["suspend"] is True  # created suspended; Kueue admits it
    assert not world.child("r1-train").suspended  # the simulated Kueue admitted it

    def suspend(body: dict[str, Any]) -> None:
        body["spec"]["suspend"] = True

    world.step(suspend)
    every = [a for actions in world.actions for a in actions]
    assert not any(isinstance(a, SetSuspend) for a in every)
    assert SetWorkloadActive("job-r1-train-abcde", False) in world.actions[-1]


def test_a_deadline_edit_never_patches_a_running_trainjob(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = trainjob_world(sim)

    def edit(body: dict[str, Any]) -> None:
        body["spec"]["training"]["activeDeadlineSeconds"] = 3600

    world.step(edit)
    assert not any(isinstance(a, SetDeadline) for a in world.actions[-1])


def test_finished_trainjobs_are_deleted_once_the_ttl_expires(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = trainjob_world(sim, spec=make_spec(ttlSecondsAfterFinished=60))
    world.finish("r1-train", result={"finalUri": "s3://a/final"}, pods=2)
    world.settle()
    world.finish("r1-eval", result={"acceptanceLength": 5.0})
    world.settle()
    world.now += timedelta(seconds=61)
    world.step()
    deleted = {(a.kind, a.name) for a in world.actions[-1] if isinstance(a, DeleteChild)}
    assert ("TrainJob", "r1-train") in deleted


def test_a_trainjob_stopped_by_the_likelihood_monitor_stops_the_run(
    sim: Callable[..., Any],
) -> None:
    world = trainjob_world(sim)
    stopped = {"stage": "train", "ok": False, "gate": "training", "verdict": "fail", "step": 4,
               "message": "stopped", "violations": [], "metrics": {}}  # fmt: skip
    world.finish("r1-train", result=stopped, pods=2)
    world.settle()
    assert world.status["phase"] == "AuditFailed"
    assert [c.name for c in creates(world) if c.kind == "TrainJob"] == ["r1-train"]


def test_gpu_hours_count_a_trainjobs_pods(sim: Callable[..., Any]) -> None:
    world = trainjob_world(sim)
    job = world.child("r1-train")
    world.pods.append(
        PodView(
            name="r1-train-node-0-0-x",
            uid="p",
            owner_name="r1-train",
            owner_uid=job.uid,
            stage=job.stage,
            attempt=1,
            phase="Running",
            gpus=4.0,
            started_at=world.now - timedelta(hours=2),
        )
    )
    world.now += timedelta(minutes=10)
    world.step()
    assert world.status["gpuHours"]["total"] >= 8.0


SPEC = {
    "target": {"model": "s3://models/x"},
    "data": {"sources": [{"name": "c", "uri": "s3://data/c.jsonl", "format": "openai-messages"}]},
    "storage": {"bucket": "artifacts"},
}


def test_a_run_whose_training_children_are_gone_keeps_the_kind_status_recorded() -> None:
    """An older operator's run past training (its PyTorchJob deleted by a ttl or by hand):
    status.children still says PyTorchJob, and a retry of training trains as one."""
    status = DFlashRunStatus.model_validate({"children": [
        {"kind": "PyTorchJob", "apiVersion": "kubeflow.org/v1", "name": "r-train",
         "uid": "u", "stage": "train", "attempt": 1}]})  # fmt: skip
    choice = choose_launcher(parse_spec(SPEC), status, Observed(served_kinds=BOTH), Launcher.AUTO)
    assert choice == LauncherChoice(Launcher.PYTORCHJOB)


def test_auto_before_discovery_ever_answered_takes_trainjob_and_never_blocks() -> None:
    """No answer yet (None): not taken for "not served"; a TrainJob whose CRD is missing
    after all is then named by its create failure (TrainingOperatorMissing)."""
    choice = choose_launcher(parse_spec(SPEC), DFlashRunStatus(), Observed(), Launcher.AUTO)
    assert choice == LauncherChoice(Launcher.TRAINJOB)


def test_a_retried_trainjob_gets_its_restarts_again(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = trainjob_world(sim, **trains(make_spec, maxRestarts=1))
    world.finish("r1-train", ok=False, message="JobSetFailed: a rank was killed")
    world.settle()
    assert (
        world.manifests[("TrainJob", "r1-train-2")]["metadata"]["annotations"][
            "dflash.dev/failure-restarts"
        ]
        == "1"
    )
    world.finish("r1-train-2", ok=False, message="JobSetFailed: a rank was killed")
    world.settle()
    assert world.status["phase"] == "Failed"

    def retry(body: dict[str, Any]) -> None:
        body["metadata"]["annotations"]["dflash.dev/retry"] = "again"

    world.step(retry)
    world.settle()
    assert "dflash.dev/failure-restarts" not in world.manifests[("TrainJob", "r1-train-3")][
        "metadata"]["annotations"]  # fmt: skip
    world.finish("r1-train-3", ok=False, message="JobSetFailed: a rank was killed")
    world.settle()
    assert world.condition("Trained")["reason"] == "WorkloadRestarted"
    assert "r1-train-4" in world.created


def test_a_launcher_edit_never_restarts_the_running_training(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = trainjob_world(sim)

    def edit(body: dict[str, Any]) -> None:
        body["spec"]["training"]["launcher"] = "pytorchjob"
        body["metadata"]["generation"] += 1

    world.step(edit)
    world.settle()
    assert not any(isinstance(a, DeleteChild) for actions in world.actions for a in actions)
    assert world.status["launcher"] == "trainjob"
    assert world.status["observedGeneration"] == 2
