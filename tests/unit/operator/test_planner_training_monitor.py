"""The training likelihood monitor in the planner: a train child that the monitor stopped is
not a success; the run stops at AuditFailed naming the source and the step (gate `training`),
stays there quietly, cannot be approved, and a retry of training starts a new attempt."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from dflash_operator.api.annotations import AnnotationError, parse_approvals
from dflash_operator.handlers.children import build_run_entry
from dflash_operator.metrics import TrainingLikelihoodCollector
from dflash_operator.plan.actions import DeleteChild
from dflash_operator.plan.observed import PodView, Termination

STOPPED = {
    "stage": "train",
    "ok": False,
    "gate": "training",
    "verdict": "fail",
    "step": 40,
    "message": "training stopped at step 40: off_distribution_rate ...",
    "violations": [
        {
            "check": "off_distribution_rate",
            "thresholdField": "maxOffDistributionRate",
            "value": 0.31,
            "threshold": 0.05,
            "message": "off_distribution_rate: 93.8% of scored rows are not what the target "
            "would generate in web (above the limit 5.0%; 64 rows scored by step 40)",
            "sources": ["web"],
            "perSource": {"web": 0.938},
            "worstSource": "web",
            "worstValue": 0.938,
        }
    ],
    "metrics": {"step": 40.0, "scoredRows": 192.0, "offRows": 60.0},
    "reportUri": "s3://artifacts/ml/r1/uid/audit/training",
}


def stopped_in_training(sim: Callable[..., Any]) -> Any:
    world = sim()
    world.step()
    world.finish_data_stages()
    assert "r1-train" in world.created
    world.finish("r1-train", result=STOPPED, pods=2)  # every rank exits 0 with the verdict
    world.settle()
    return world


def test_a_training_stopped_by_the_monitor_is_audit_failed_naming_source_and_step(
    sim: Callable[..., Any],
) -> None:
    world = stopped_in_training(sim)

    assert world.status["phase"] == "AuditFailed"
    assert "r1-eval" not in world.created and world.status.get("drafterUri") is None
    trained = world.condition("Trained")
    assert (trained["status"], trained["reason"]) == ("False", "TrainingAuditFailed")
    assert "stopped training at step 40" in trained["message"]
    assert "in web (above the limit 5.0%" in trained["message"]
    assert "spec.audit.likelihood.maxOffDistributionRate" in trained["message"]
    audit = world.status["audit"]["training"]
    assert audit["verdict"] == "fail" and audit["violations"][0]["sources"] == ["web"]
    path = audit["violations"][0]["thresholdField"]
    assert path == "spec.audit.likelihood.maxOffDistributionRate"
    assert world.status[
        "auditVerdict"
    ] == "canary=pass completions=pass tokens=pass training=fail" or (
        world.status["auditVerdict"].endswith("training=fail")
    )
    passed = world.condition("DataAuditPassed")
    assert (passed["status"], passed["reason"]) == ("False", "AuditFailed")


def test_it_stays_stopped_quietly_and_is_counted_once(sim: Callable[..., Any]) -> None:
    world = stopped_in_training(sim)
    again = world.step()
    assert again.actions == () and again.events == () and again.gate_failures == ()
    assert [g.value for p in world.plans for g in p.gate_failures] == ["training"]


def test_the_training_gate_cannot_be_approved_and_a_retry_trains_again(
    sim: Callable[..., Any],
) -> None:
    world = stopped_in_training(sim)
    try:
        parse_approvals("training@1")
        raise AssertionError("a training approval was accepted")
    except AnnotationError as error:
        assert "dflash.dev/retry=train" in str(error)
    world.step(
        lambda body: body["metadata"]["annotations"].update(
            {"dflash.dev/approve-audit": "training@1"}
        )
    )
    assert world.status["phase"] == "AuditFailed"
    assert "training gate cannot be approved" in world.status["message"]

    world.step(lambda body: body["metadata"]["annotations"].update({"dflash.dev/retry": "train:1"}))
    world.settle()
    assert "r1-train-2" in world.created
    assert world.status["phase"] == "Training"
    assert world.status["audit"].get("training") is None


def test_the_monitors_figures_reach_prometheus_per_source() -> None:
    status = {
        "training": {
            "likelihood": {
                "step": 30,
                "sources": {
                    "web": {"scoredRows": 48, "offRows": 40, "offDistributionRate": 0.8333},
                    "chat": {"scoredRows": 52, "offRows": 0, "offDistributionRate": 0.0},
                },
            }
        }
    }
    entry = build_run_entry(status, {"generation": 1})
    assert entry.likelihood == (("chat", 52, 0.0), ("web", 48, 0.8333))
    families = list(TrainingLikelihoodCollector(lambda: {"ns/r1": entry.likelihood}).collect())
    samples = {(f.name, s.labels["source"]): s.value for f in families for s in f.samples}
    assert samples[("dflash_training_off_distribution_rate", "web")] == 0.8333
    assert samples[("dflash_training_scored_rows", "chat")] == 52
    assert {s.labels["run"] for f in families for s in f.samples} == {"r1"}


# --- fail closed: a result that cannot be read is never a success -------------------------------
def full_report_of(sources: int) -> str:
    """The old, unbounded monitor result for `sources` failing sources, as the kubelet keeps
    it: its first 4096 bytes."""
    names = [f"source-{i:02d}-with-a-long-descriptive-name" for i in range(sources)]
    result = dict(STOPPED)
    result["violations"] = [
        {**STOPPED["violations"][0], "sources": names, "perSource": dict.fromkeys(names, 0.5)}
    ]
    text = json.dumps(result)
    assert len(text.encode()) > 4096
    return text.encode()[:4096].decode(errors="ignore")


def with_message(world: Any, child: str, message: str) -> None:
    """Every finished pod of `child` reports `message` as its termination message."""
    world.pods[:] = [
        replace(p, terminated=replace(p.terminated, message=message))
        if p.owner_name == child and p.terminated
        else p
        for p in world.pods
    ]


def test_a_training_result_cut_at_4_kib_fails_the_run_and_never_reads_as_succeeded(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.finish_data_stages()
    world.finish("r1-train", result=None, pods=2)
    with_message(world, "r1-train", full_report_of(60))
    world.settle()

    assert world.status["phase"] == "Failed"
    assert world.status.get("drafterUri") is None and "r1-eval" not in world.created
    trained = world.condition("Trained")
    assert (trained["status"], trained["reason"]) == ("False", "StageResultUnreadable")
    assert (
        "not a JSON object (4096 bytes, cut at the kubelet's 4096-byte limit)"
        in (trained["message"])
    )
    assert "pod r1-train-" in trained["message"]
    assert (world.condition("Succeeded") or {}).get("status") != "True"


@pytest.mark.parametrize(
    ("child", "message", "problem"),
    [
        ("r1-train", "", "the termination message is empty"),
        ("r1-train", '{"stage": "train", "ok": true}', "finalUri is None"),
        ("r1-train", '{"stage": "train", "ok": false, "finalUri": "s3://a/f"}', "ok is false"),
        ("r1-audit-completions", "Traceback (most recent call last)", "not a JSON object"),
        ("r1-audit-completions", '{"verdict": "maybe"}', "verdict is 'maybe'"),
    ],
)
def test_a_succeeded_child_whose_result_cannot_be_used_fails_with_its_own_reason(
    sim: Callable[..., Any], child: str, message: str, problem: str
) -> None:
    world = sim()
    world.step()
    if child == "r1-train":
        world.finish_data_stages()
    else:
        world.finish("r1-regen", result={"samples": 10}, pods=4)
        world.settle()
    world.finish(child, result=None, pods=2 if child == "r1-train" else 1)
    with_message(world, child, message)
    world.settle()

    assert world.status["phase"] == "Failed"
    condition = world.condition("Trained" if child == "r1-train" else "CompletionsAudited")
    assert (condition["status"], condition["reason"]) == ("False", "StageResultUnreadable")
    assert problem in world.status["message"]
    assert world.status.get("drafterUri") is None
    if child == "r1-audit-completions":
        assert (world.status.get("audit") or {}).get("completions") is None


def test_an_evaluation_without_an_acceptance_length_fails_instead_of_succeeding(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.finish_data_stages()
    world.finish("r1-train", result={"finalUri": "s3://a/final"}, pods=2)
    world.settle()
    world.finish("r1-eval", result={"stage": "evaluate", "ok": True})
    world.settle()

    assert world.status["phase"] == "Failed"
    assert "acceptanceLength is None" in world.condition("Evaluated")["message"]


def test_a_monitor_stop_seen_before_an_in_place_restart_stops_the_child_at_once(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.finish_data_stages()
    view = world.child("r1-train")
    world.pods.append(
        PodView(
            name="r1-train-master-0", uid="pod-train", owner_name="r1-train",
            owner_uid=view.uid, stage=view.stage, attempt=1, phase="Running",
            replica_type="master", restarts=1,
            last_failure=Termination(3, "Error", json.dumps(STOPPED)),
        )
    )  # fmt: skip
    world.step()

    assert world.status["phase"] == "AuditFailed"
    assert DeleteChild("PyTorchJob", "r1-train") in world.actions[-1]
    assert world.condition("Trained")["reason"] == "TrainingAuditFailed"
    assert world.step().actions == ()
