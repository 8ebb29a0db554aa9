"""The planner walks a run through every phase: exact children, phases, conditions and
events at each step, and nothing done twice."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from dflash_operator.plan.actions import CreateChild
from dflash_operator.plan.observed import RUNNING, Observed
from dflash_operator.plan.planner import PlanInput, plan
from dflash_operator.plan.stages import PlanSettings

REGEN_RESULT = {
    "stage": "regenerate",
    "ok": True,
    "samples": 1000,
    "outputTokens": 400000,
    "skipped": False,
}
PASS = {"stage": "audit", "ok": True, "verdict": "pass", "reportUri": "s3://artifacts/report"}
TOKENIZE_RESULT = {
    "stage": "tokenize",
    "ok": True,
    "samples": 3990,
    "tokens": 9_000_000,
    "supervisedTokens": 4_000_000,
    "truncated": 12,
    "shards": 2,
}
TRAIN_RESULT = {
    "stage": "train",
    "ok": True,
    "step": 100,
    "totalSteps": 100,
    "finalUri": "s3://artifacts/final",
}
EVAL_RESULT = {"stage": "evaluate", "ok": True, "acceptanceLength": 6.25, "prompts": 128}

# (child that finishes, its result, pods, phase after, the children created by then)
PIPELINE = [
    ("r1-regen", REGEN_RESULT, 4, "AuditingCompletions", ["r1-regen", "r1-audit-completions"]),
    ("r1-audit-completions", PASS, 1, "Tokenizing", ["r1-tokenize"]),
    ("r1-tokenize", TOKENIZE_RESULT, 1, "AuditingTokens", ["r1-audit-tokens"]),
    (
        "r1-audit-tokens",
        PASS,
        1,
        "Training",
        ["r1-trainer", "r1-trainer", "r1-trainer", "r1-train"],
    ),
    ("r1-train", TRAIN_RESULT, 2, "Evaluating", ["r1-eval"]),
    ("r1-eval", EVAL_RESULT, 1, "Succeeded", []),
]


def test_a_new_run_gets_its_config_and_regeneration_job_and_is_regenerating(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    result = world.step()

    assert world.created == ["r1-regen"]
    assert ("ConfigMap", "r1-config") in world.children
    assert world.status["phase"] == "Regenerating"
    assert world.status["attempts"] == {"regen": 1}
    assert world.condition("Regenerated")["reason"] == "StageRunning"
    assert [e.reason for e in result.events] == ["StageRunning"]
    assert {c["name"] for c in world.status["children"]} == {"r1-config", "r1-regen"}


def test_a_run_walks_every_phase_with_exactly_one_child_per_stage(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    seen = ["r1-regen"]
    for name, result, pods, phase, created in PIPELINE:
        world.finish(name, result=result, pods=pods)
        world.settle()
        assert world.status["phase"] == phase, name
        seen += created[1:] if name == "r1-regen" else created
        assert world.created == seen
    status = world.status
    assert status["drafterUri"] == "s3://artifacts/final"
    assert status["acceptanceLength"] == 6.25
    assert status["stages"]["regeneration"] == {
        "shardsDone": 4,
        "shardsTotal": 4,
        "shardsSkipped": 0,
        "samples": 4000,
        "outputTokens": 1600000,
    }
    assert status["stages"]["tokenization"]["supervisedTokens"] == 4_000_000
    assert status["auditVerdict"] == "completions=pass tokens=pass"
    assert (
        status["nodePools"]
        == "regen=b200 audit=cpu tokenize=cpu train=rtx-pro-6000 eval=rtx-pro-6000"
    )
    assert world.condition("Succeeded")["status"] == "True"
    assert status["completionTime"]


def test_reconciling_an_unchanged_run_again_does_nothing_and_says_nothing(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    before = world.status
    again = world.step()

    assert again.actions == ()
    assert again.events == ()
    assert world.status == before


@pytest.mark.parametrize("stage_index", range(len(PIPELINE)))
def test_every_transition_posts_events_once(sim: Callable[..., Any], stage_index: int) -> None:
    world = sim()
    world.step()
    for name, result, pods, _phase, _created in PIPELINE[: stage_index + 1]:
        world.finish(name, result=result, pods=pods)
        world.settle()
    quiet = world.step()
    assert quiet.events == () and quiet.actions == ()


def test_the_training_child_is_created_after_its_identity(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    for name, result, pods, _phase, _created in PIPELINE[:4]:
        world.finish(name, result=result, pods=pods)
        world.settle()
    kinds = [(k, n) for (k, n) in world.children if n.startswith("r1-train")]
    assert kinds == [
        ("ServiceAccount", "r1-trainer"),
        ("Role", "r1-trainer"),
        ("RoleBinding", "r1-trainer"),
        ("PyTorchJob", "r1-train"),
    ]


def test_without_regeneration_the_imported_completions_are_scored_then_audited(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    spec = make_spec(
        regeneration={"enabled": False},
        data={"sources": [{"name": "done", "uri": "s3://data/regen/", "format": "regenerated"}]},
    )
    world = sim(spec=spec)
    world.step()

    # The score stage copies them into the run and scores a sample under the target.
    assert world.created == ["r1-score"]
    assert world.status["phase"] == "Scoring"
    assert world.condition("Regenerated")["reason"] == "StageSkipped"
    assert world.condition("Regenerated")["status"] == "True"
    args = world.manifests[("Job", "r1-score")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["python3", "-m", "dflash_trainer.data.likelihood"]
    assert args[args.index("--samples-per-source") + 1] == "64"
    world.finish("r1-score", result={"stage": "score", "ok": True, "samples": 900, "scored": 64,
                                     "scoresUri": "s3://x/likelihood/sample"})  # fmt: skip
    world.settle()
    assert world.created == ["r1-score", "r1-audit-completions"]
    assert "900 imported completions" in world.condition("LikelihoodScored")["message"]
    audit = world.manifests[("Job", "r1-audit-completions")]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert audit["args"][audit["args"].index("--scores") + 1].endswith("/likelihood/sample")


def test_without_evaluation_the_run_succeeds_after_training(
    sim: Callable[..., Any], make_spec: Callable[..., Any]
) -> None:
    world = sim(spec=make_spec(evaluation={"enabled": False}))
    world.step()
    for name, result, pods, _phase, _created in PIPELINE[:5]:
        world.finish(name, result=result, pods=pods)
        world.settle()

    assert world.status["phase"] == "Succeeded"
    assert "r1-eval" not in world.created
    assert "not measured" in world.status["message"]


def test_regeneration_progress_counts_committed_shards(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    world.finish("r1-regen", result=REGEN_RESULT, pods=2)
    # Two of four shards are done; the Job is still running.
    world.children[("Job", "r1-regen")] = replace(world.child("r1-regen"), finished=RUNNING)
    world.step()

    assert world.status["progress"] == "regen 2/4"
    assert world.status["stages"]["regeneration"]["samples"] == 2000
    assert "2/4 shards committed" in world.condition("Regenerated")["message"]


def test_training_progress_comes_from_the_trainers_status_patch(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    for name, result, pods, _phase, _created in PIPELINE[:4]:
        world.finish(name, result=result, pods=pods)
        world.settle()
    world.body["status"]["training"] = {"step": 1200, "totalSteps": 40000, "loss": 2.5}
    world.step()

    assert world.status["progress"] == "train 1200/40000"
    assert "loss 2.5" in world.condition("Trained")["message"]


def test_children_carry_the_runs_labels_and_owner_reference(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    job = world.manifests[("Job", "r1-regen")]
    assert job["metadata"]["labels"]["dflash.dev/run"] == "r1"
    assert job["metadata"]["labels"]["dflash.dev/stage"] == "regen"
    assert job["metadata"]["labels"]["dflash.dev/attempt"] == "1"
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("DFlashRun", "r1", True)


def test_the_first_plan_creates_the_config_before_the_job(
    sim: Callable[..., Any], make_body: Callable[..., Any], pools: Any
) -> None:
    first = plan(PlanInput(make_body(), Observed(), pools, PlanSettings(), sim().now))
    kinds = [type(a).__name__ for a in first.actions]
    assert kinds == ["ApplyConfig", "CreateChild"]
    assert isinstance(first.actions[1], CreateChild) and first.actions[1].name == "r1-regen"
