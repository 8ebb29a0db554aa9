"""Audit gates in the planner: a failed gate stops the run before any GPU child, names each
violated check, and waits for a retry (new attempt) or an approval (recorded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

REGEN = {"stage": "regenerate", "ok": True, "samples": 900, "outputTokens": 5400}
STUB_FAIL = {
    "stage": "audit",
    "ok": False,
    "gate": "completions",
    "verdict": "fail",
    "violations": [
        {
            "check": "maxStubRate",
            "value": 0.871,
            "threshold": 0.05,
            "message": "stub responses 87.1% > 5%",
        },
        {"check": "maxEmptyThinkingRate", "value": 0.9, "threshold": 0.05},
    ],
    "metrics": {"stubRate": 0.871, "samples": 914000, "note": "not a number"},
    "reportUri": "s3://artifacts/ml/r1/uid/audit/completions/",
}


def blocked_at_completions(sim: Callable[..., Any], **kwargs: Any) -> Any:
    world = sim(**kwargs)
    world.step()
    world.finish("r1-regen", result=REGEN, pods=4)
    world.settle()
    world.finish(
        "r1-audit-completions",
        ok=False,
        result=STUB_FAIL,
        exit_code=3,
        message="PodFailurePolicy: exit code 3",
    )
    world.settle()
    return world


def test_a_failed_completions_audit_stops_the_run_in_audit_failed(sim: Callable[..., Any]) -> None:
    world = blocked_at_completions(sim)

    assert world.status["phase"] == "AuditFailed"
    assert world.created == ["r1-regen", "r1-audit-completions"]
    passed = world.condition("DataAuditPassed")
    assert (passed["status"], passed["reason"]) == ("False", "AuditFailed")
    assert "stub responses 87.1% > 5%" in passed["message"]
    assert "maxEmptyThinkingRate: 90% > 5%" in passed["message"]
    assert "s3://artifacts/ml/r1/uid/audit/completions/" in passed["message"]
    assert "dflash.dev/approve-audit=completions@1" in passed["message"]
    audit = world.status["audit"]["completions"]
    assert audit["verdict"] == "fail"
    assert audit["reportUri"] == "s3://artifacts/ml/r1/uid/audit/completions/"
    assert audit["metrics"] == {"stubRate": 0.871, "samples": 914000.0}
    assert world.status["auditVerdict"] == "completions=fail"
    assert ("AuditFailed", passed["message"]) in world.events()


def test_a_blocked_run_stays_blocked_and_quiet(sim: Callable[..., Any]) -> None:
    world = blocked_at_completions(sim)
    again = world.step()

    assert again.actions == () and again.events == ()
    assert again.gate_failures == ()


def test_the_failed_gate_is_counted_once(sim: Callable[..., Any]) -> None:
    world = blocked_at_completions(sim)
    assert [g.value for p in world.plans for g in p.gate_failures] == ["completions"]


@pytest.mark.parametrize("approval", ["completions@1", "tokens@1, completions@1"])
def test_an_approval_of_the_failed_gate_lets_the_run_continue(
    sim: Callable[..., Any], approval: str
) -> None:
    world = blocked_at_completions(sim)
    world.step(
        lambda body: body["metadata"]["annotations"].update({"dflash.dev/approve-audit": approval})
    )

    assert world.status["phase"] == "Tokenizing"
    assert world.created[-1] == "r1-tokenize"
    assert world.status["audit"]["completions"]["approved"] is True
    assert world.status["approvals"][0]["gate"] == "completions"
    assert world.status["approvals"][0]["generation"] == 1
    assert world.condition("CompletionsAudited")["reason"] == "AuditApproved"
    assert world.condition("DataAuditPassed")["status"] == "True"
    assert world.status["auditVerdict"] == "completions=approved"
    assert any(reason == "AuditApproved" for reason, _ in world.events())


@pytest.mark.parametrize(
    "approval", ["completions@2", "tokens@1", "completions", "everything", "completions@x"]
)
def test_an_approval_that_does_not_match_leaves_the_run_blocked(
    sim: Callable[..., Any], approval: str
) -> None:
    world = blocked_at_completions(sim)
    world.step(
        lambda body: body["metadata"]["annotations"].update({"dflash.dev/approve-audit": approval})
    )

    assert world.status["phase"] == "AuditFailed"
    assert "r1-tokenize" not in world.created


def test_a_malformed_approval_is_explained_in_the_status_message(sim: Callable[..., Any]) -> None:
    world = blocked_at_completions(sim)
    world.step(
        lambda body: body["metadata"]["annotations"].update(
            {"dflash.dev/approve-audit": "everything"}
        )
    )

    assert "entry 'everything' is not accepted" in world.status["message"]


def test_a_retry_reruns_the_gate_as_a_new_attempt(sim: Callable[..., Any]) -> None:
    world = blocked_at_completions(sim)
    world.step(
        lambda body: body["metadata"]["annotations"].update(
            {"dflash.dev/retry": "looser-thresholds"}
        )
    )

    assert world.created[-1] == "r1-audit-completions-2"
    assert world.status["attempts"]["audit-completions"] == 2
    assert world.status["retryToken"] == "looser-thresholds"
    assert world.status["phase"] == "AuditingCompletions"
    assert "audit" not in world.status or world.status["audit"].get("completions") is None
    assert any(reason == "RetryRequested" for reason, _ in world.events())
    world.finish("r1-audit-completions-2", result={"stage": "audit", "ok": True, "verdict": "pass"})
    world.settle()
    assert world.status["phase"] == "Tokenizing"


def test_the_same_retry_token_is_acted_on_once(sim: Callable[..., Any]) -> None:
    world = blocked_at_completions(sim)
    world.step(lambda body: body["metadata"]["annotations"].update({"dflash.dev/retry": "1"}))
    world.settle()

    assert world.created.count("r1-audit-completions-2") == 1
    assert "r1-audit-completions-3" not in world.created


def test_a_retry_naming_an_earlier_stage_reruns_it_and_everything_after(
    sim: Callable[..., Any],
) -> None:
    world = blocked_at_completions(sim)
    world.step(
        lambda body: body["metadata"]["annotations"].update(
            {"dflash.dev/retry": "regen:fixed-data"}
        )
    )

    assert world.created[-1] == "r1-regen-2"
    assert world.status["phase"] == "Regenerating"
    assert world.condition("CompletionsAudited") is None
    world.finish("r1-regen-2", result=REGEN, pods=4)
    world.settle()
    assert world.created[-1] == "r1-audit-completions-2"


def test_a_changed_threshold_rewrites_the_config_before_the_retry(sim: Callable[..., Any]) -> None:
    world = blocked_at_completions(sim)
    before = world.child("r1-config", "ConfigMap").config_hash

    def loosen(body: dict[str, Any]) -> None:
        body["spec"]["audit"] = {"maxStubRate": 0.9}
        body["metadata"]["generation"] = 2
        body["metadata"]["annotations"]["dflash.dev/retry"] = "2"

    world.step(loosen)
    assert world.child("r1-config", "ConfigMap").config_hash != before
    assert (
        "maxStubRate: 0.9" in world.manifests[("ConfigMap", "r1-config")]["data"]["thresholds.yaml"]
    )


def test_a_tokens_gate_failure_blocks_before_training(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    world.finish("r1-regen", result=REGEN, pods=4)
    world.settle()
    world.finish("r1-audit-completions", result={"verdict": "pass"})
    world.settle()
    world.finish("r1-tokenize", result={"samples": 10})
    world.settle()
    world.finish(
        "r1-audit-tokens",
        ok=False,
        exit_code=3,
        result={
            "verdict": "fail",
            "violations": [{"check": "maxLossMaskModeShare", "value": 0.87, "threshold": 0.1}],
        },
    )
    world.settle()

    assert world.status["phase"] == "AuditFailed"
    assert not any(name.startswith("r1-train") for name in world.created)
    assert "maxLossMaskModeShare: 87% > 10%" in world.condition("DataAuditPassed")["message"]


def test_an_audit_that_crashed_fails_the_run_instead_of_blocking_it(
    sim: Callable[..., Any],
) -> None:
    world = sim()
    world.step()
    world.finish("r1-regen", result=REGEN, pods=4)
    world.settle()
    world.finish(
        "r1-audit-completions",
        ok=False,
        exit_code=1,
        result={"stage": "audit", "ok": False, "message": "MemoryError"},
    )
    world.settle()

    assert world.status["phase"] == "Failed"
    assert world.condition("Failed")["reason"] == "RetriesExhausted"
    assert "MemoryError" in world.condition("Failed")["message"]


def test_a_stopping_gate_says_how_many_gpu_hours_it_saved(sim: Callable[..., Any]) -> None:
    """regen measured 3600 samples x 6 output tokens; training is 6 epochs on the rtx pool
    (GPU stages after the gate: train, eval) at the operator's default throughputs."""
    world = blocked_at_completions(sim)
    saved = [m for r, m in world.events() if r == "GpuHoursSaved"]
    assert len(saved) == 1, world.events()
    assert saved[0].startswith("The completions gate stopped the run before train")
    assert "3,600 samples x 6 output tokens" in saved[0]
    # 6 epochs x 3600 x 6 / 0.7 tokens at 4000/s, plus evaluation's 128 x 256 at 1500/s.
    expected = 6 * 3600 * 6 / 0.7 / 4000 / 3600 + 128 * 256 / 1500 / 3600
    assert f"about {expected:,.0f} GPU-hours" in saved[0]


def test_the_saving_of_a_realistic_run_is_its_training_cost(sim: Callable[..., Any]) -> None:
    world = sim()
    world.step()
    big = {"stage": "regenerate", "ok": True, "samples": 225_000, "outputTokens": 270_000_000}
    world.finish("r1-regen", result=big, pods=4)
    world.settle()
    world.finish("r1-audit-completions", ok=False, result=STUB_FAIL, exit_code=3,
                 message="PodFailurePolicy: exit code 3")  # fmt: skip
    world.settle()
    (saved,) = [m for r, m in world.events() if r == "GpuHoursSaved"]
    # 900k samples x 1200 tokens, 6 epochs, sequences 1/0.7 of the completion, 4000 tokens/s.
    assert "900,000 samples x 1,200 output tokens" in saved
    assert "about 643 GPU-hours not spent" in saved
