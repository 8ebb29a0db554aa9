"""Spec edits of a running run: every editable field takes effect (the running stage's child
restarts as the next attempt, observedGeneration follows only once it has), deadlines are
patched in place, and nothing restarts for an edit the running stage does not read."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from dflash_operator.api.constants import Stage
from dflash_operator.children.meta import ANNOTATION_SPEC_INPUTS
from dflash_operator.plan.actions import CreateChild, DeleteChild, SetDeadline
from dflash_operator.plan.observed import PodView
from dflash_operator.plan.stage_inputs import changed_inputs, format_inputs

from .conftest import RUN_UID

REGEN = {"samples": 10}
PASS = {"verdict": "pass"}


def edit(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def apply(body: dict[str, Any]) -> None:
        change(body["spec"])
        body["metadata"]["generation"] += 1

    return apply


def training(sim: Callable[..., Any]) -> Any:
    world = sim()
    world.step()
    world.finish_data_stages()
    assert world.status["phase"] == "Training"
    return world


def actions(world: Any, kind: type) -> list[Any]:
    return [a for step in world.actions for a in step if isinstance(a, kind)]


def running_pod(world: Any, child: str) -> PodView:
    view = world.child(child)
    return PodView(
        name=f"{child}-0-zzz", uid=f"pod-{child}", owner_name=child, owner_uid=view.uid,
        run_uid=RUN_UID, stage=view.stage, attempt=view.attempt, phase="Running",
    )  # fmt: skip


def test_an_edit_of_the_running_stage_restarts_it_as_the_next_attempt(
    sim: Callable[..., Any],
) -> None:
    world = training(sim)
    pod = running_pod(world, "r1-train")
    world.pods.append(pod)
    world.step(edit(lambda spec: spec["training"].update(learningRate=0.0002)))

    assert actions(world, DeleteChild) == [DeleteChild("PyTorchJob", "r1-train")]
    trained = world.condition("Trained")
    assert trained is not None and trained["reason"] == "SpecChanged"
    assert (
        "train restarts as attempt 2 to apply the edit of spec.training, train.yaml"
        in (trained["message"])
    )
    assert "resumes from its newest checkpoint" in trained["message"]
    # Not observed until the new child runs with it: Argo CD shows Progressing meanwhile.
    assert world.status["observedGeneration"] == 1

    # The old pod (its PyTorchJob is gone) still runs: attempt 2 waits for it.
    world.step()
    assert world.created.count("r1-train-2") == 0
    assert "pod(s) of an earlier attempt to stop" in world.status["message"]
    assert world.status["observedGeneration"] == 1

    world.pods.remove(pod)
    world.pods.append(replace(pod, phase="Failed"))
    world.settle()
    assert "r1-train-2" in world.created
    created = world.manifests[("PyTorchJob", "r1-train-2")]
    assert "lr: 0.0002" in world.manifests[("ConfigMap", "r1-config")]["data"]["train.yaml"]
    assert ANNOTATION_SPEC_INPUTS in created["metadata"]["annotations"]
    assert world.status["observedGeneration"] == 2
    assert world.condition("Trained")["reason"] == "StageRunning"
    assert [r for r, _ in world.events()].count("SpecChanged") == 1


def test_an_edit_of_a_later_stage_does_not_touch_the_running_one(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.step(edit(lambda spec: spec["training"].update(learningRate=0.0002)))

    assert actions(world, DeleteChild) == []
    assert world.created == ["r1-regen"]
    assert world.status["observedGeneration"] == 2  # taken: training is rendered from it


def test_a_deadline_edit_is_patched_onto_the_running_child_without_a_restart(
    sim: Callable[..., Any],
) -> None:
    world = training(sim)
    world.step(edit(lambda spec: spec["training"].update(activeDeadlineSeconds=7200)))

    assert actions(world, SetDeadline) == [SetDeadline("PyTorchJob", "r1-train", 7200)]
    assert actions(world, DeleteChild) == []
    assert world.child("r1-train").active_deadline_seconds == 7200
    world.step(edit(lambda spec: spec["training"].pop("activeDeadlineSeconds")))
    assert actions(world, SetDeadline)[-1] == SetDeadline("PyTorchJob", "r1-train", None)
    assert world.status["observedGeneration"] == 3


def test_a_suspended_run_takes_edits_and_restarts_the_stage_on_resume(
    sim: Callable[..., Any],
) -> None:
    world = training(sim)
    world.step(edit(lambda spec: spec.update(suspend=True)))
    world.step(edit(lambda spec: spec["training"].update(batchSize=2)))

    assert actions(world, DeleteChild) == []
    assert world.status["observedGeneration"] == 3

    world.step(edit(lambda spec: spec.update(suspend=False)))
    assert actions(world, DeleteChild) == [DeleteChild("PyTorchJob", "r1-train")]
    world.settle()
    assert "r1-train-2" in world.created
    assert world.status["observedGeneration"] == 4


def test_an_edit_of_a_finished_stage_restarts_nothing(sim: Callable[..., Any]) -> None:
    world = training(sim)
    world.step(
        edit(lambda spec: spec.setdefault("audit", {}).update(maxStubRate=0.2))
    )  # audits are done
    world.step(edit(lambda spec: spec.update(ttlSecondsAfterFinished=600)))

    assert actions(world, DeleteChild) == []
    assert world.status["observedGeneration"] == 3


def test_switching_a_running_stage_off_stops_its_child(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    world.step(
        edit(
            lambda spec: (
                spec["regeneration"].update(enabled=False),
                [s.update(format="regenerated") for s in spec["data"]["sources"]],
            )
        )
    )
    assert DeleteChild("Job", "r1-regen") in actions(world, DeleteChild)


def test_children_of_an_older_operator_are_not_restarted(sim: Callable[..., Any]) -> None:
    world = training(sim)
    key = ("PyTorchJob", "r1-train")
    world.children[key] = replace(world.children[key], spec_inputs=None)
    world.step(edit(lambda spec: spec["training"].update(learningRate=0.0002)))
    assert actions(world, DeleteChild) == []


def test_the_changed_parts_are_named() -> None:
    """The parts that changed are named; an unchanged record means no restart."""
    wanted = {"spec.training": "aaa", "spec.storage": "bbb", "train.yaml": "ccc"}
    assert changed_inputs(format_inputs(wanted), wanted) == []
    assert changed_inputs(format_inputs({**wanted, "spec.training": "zzz"}), wanted) == [
        "spec.training"
    ]
    assert changed_inputs("spec.training:aaa", wanted) == ["spec.storage", "train.yaml"]


def test_only_the_running_stages_own_section_restarts_it(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    world.step(edit(lambda spec: spec["regeneration"].update(maxNewTokens=2048)))
    assert actions(world, DeleteChild) == [DeleteChild("Job", "r1-regen")]
    regen = world.condition("Regenerated")
    assert "spec.regeneration" in regen["message"]
    assert "committed shards are kept" in regen["message"]
    world.settle()
    created = [a for a in actions(world, CreateChild) if a.name == "r1-regen-2"]
    assert created and created[0].stage == Stage.REGEN


def test_a_child_deleted_under_a_running_stage_is_recreated_only_once_its_pods_stopped(
    sim: Callable[..., Any],
) -> None:
    """`kubectl delete pytorchjob` (or a crash between a delete and the status write): the
    Job is gone at once, its pods still run; the same attempt is created again only after."""
    world = training(sim)
    pod = running_pod(world, "r1-train")
    world.pods.append(pod)
    del world.children[("PyTorchJob", "r1-train")]
    world.step()
    assert world.created.count("r1-train") == 1
    assert "waiting for 1 pod(s)" in world.status["message"]
    world.pods.remove(pod)
    world.step()
    assert world.created.count("r1-train") == 2


def test_a_missing_pytorchjob_crd_says_so_once_and_training_starts_when_it_appears(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.missing_kinds.add("PyTorchJob")
    world.step()
    world.finish_data_stages()
    for _ in range(5):  # the create is tried again every pass
        world.step()

    trained = world.condition("Trained")
    assert trained is not None and trained["reason"] == "TrainingOperatorMissing"
    assert "does not serve PyTorchJob (kubeflow.org/v1)" in trained["message"]
    assert "no operator restart is needed" in world.status["message"]
    reasons = [r for r, _ in world.events()]
    assert reasons.count("TrainingOperatorMissing") == 1
    assert "ChildCreateFailed" not in reasons
    assert world.status["phase"] == "Training"

    world.missing_kinds.clear()  # the training-operator is installed
    world.settle()
    assert "r1-train" in world.created
    assert world.condition("Trained")["reason"] == "StageRunning"
