"""The canary in the planner: a one-pod regeneration of a fixed sample per source and its own
completions gate run before the shards fan out; a failing canary stops the run at AuditFailed
before any shard exists, and is approved or retried like any gate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dflash_operator.children.commands import build_audit_args

CANARY_RESULT = {"stage": "regenerate", "ok": True, "canary": True, "samples": 512,
                 "outputTokens": 900_000}  # fmt: skip
CANARY_FAIL = {
    "stage": "audit", "ok": False, "gate": "completions", "verdict": "fail",
    "violations": [{
        "check": "stub_rate", "thresholdField": "maxStubRate", "value": 0.43, "threshold": 0.05,
        "message": "stub_rate: 87.0% of samples are stubs in openorca (above the limit 5.0%; "
                   "overall 43.0%)",
        "sources": ["openorca"],
    }],
    "reportUri": "s3://artifacts/ml/r1/uid/audit/canary/report.json",
}  # fmt: skip
PASS = {"stage": "audit", "ok": True, "gate": "completions", "verdict": "pass",
        "reportUri": "s3://artifacts/ml/r1/uid/audit/canary/report.json"}  # fmt: skip


def with_canary(make_spec: Callable[..., dict[str, Any]], per_source: int = 256) -> dict[str, Any]:
    canary = {"samplesPerSource": per_source}
    return make_spec(regeneration={"shards": 4, "tensorParallel": 2, "canary": canary})


def failed_canary(sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]) -> Any:
    """A run whose canary ran and failed its gate."""
    world = sim(spec=with_canary(make_spec))
    world.step()
    world.finish("r1-canary", result=CANARY_RESULT)
    world.settle()
    assert world.status["phase"] == "AuditingCanary"
    world.finish("r1-audit-canary", ok=False, result=CANARY_FAIL, exit_code=3,
                 message="PodFailurePolicy: exit code 3")  # fmt: skip
    world.settle()
    return world


def test_the_canary_runs_first_as_one_pod_on_the_regeneration_pool(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=with_canary(make_spec))
    world.step()

    assert world.created == ["r1-canary"]
    assert world.status["phase"] == "Canary"
    job = world.manifests[("Job", "r1-canary")]
    assert job["spec"]["completions"] == 1 and "completionMode" not in job["spec"]
    pod = job["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--canary-samples-per-source") + 1] == "256"
    assert "--shards" not in args
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-B200"}
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_a_failed_canary_stops_the_run_before_any_shard_and_names_the_source(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=with_canary(make_spec))
    world.step()
    world.finish("r1-canary", result=CANARY_RESULT)
    world.settle()
    assert world.status["phase"] == "AuditingCanary"
    assert world.status["stages"]["canary"]["samples"] == 512
    world.finish("r1-audit-canary", ok=False, result=CANARY_FAIL, exit_code=3,
                 message="PodFailurePolicy: exit code 3")  # fmt: skip
    world.settle()

    assert world.created == ["r1-canary", "r1-audit-canary"], "no regeneration shard started"
    assert world.status["phase"] == "AuditFailed"
    assert world.status["auditVerdict"] == "canary=fail"
    assert world.status["audit"]["canary"]["violations"][0]["sources"] == ["openorca"]
    passed = world.condition("DataAuditPassed")
    assert "87.0% of samples are stubs in openorca" in passed["message"]
    assert "dflash.dev/approve-audit=canary@1" in passed["message"]


def test_an_approved_canary_fans_out_and_the_full_completions_gate_still_runs(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = failed_canary(sim, make_spec)
    world.step(
        lambda body: body["metadata"]["annotations"].update(
            {"dflash.dev/approve-audit": "canary@1"}
        )
    )
    world.settle()

    assert world.created[-1] == "r1-regen" and world.status["phase"] == "Regenerating"
    assert world.status["approvals"][0]["gate"] == "canary"
    world.finish("r1-regen", result={"stage": "regenerate", "ok": True, "samples": 9}, pods=4)
    world.settle()
    assert world.created[-1] == "r1-audit-completions"


def test_a_passing_canary_lets_the_shards_fan_out(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = sim(spec=with_canary(make_spec))
    world.step()
    world.finish("r1-canary", result=CANARY_RESULT)
    world.settle()
    world.finish("r1-audit-canary", result=PASS)
    world.settle()

    assert world.created == ["r1-canary", "r1-audit-canary", "r1-regen"]
    assert world.condition("CanaryAudited")["reason"] == "AuditPassed"
    assert world.condition("CanaryRegenerated")["reason"] == "StageSucceeded"


def test_without_a_canary_its_stages_are_skipped_quietly(sim: Callable[..., Any]) -> None:
    world = sim()
    plan = world.step()

    assert world.created == ["r1-regen"]
    assert world.condition("CanaryRegenerated")["reason"] == "StageSkipped"
    assert "samplesPerSource is 0" in world.condition("CanaryAudited")["message"]
    assert all(e.reason != "StageSkipped" for e in plan.events)


def test_the_canary_gate_audits_the_canary_folder_with_the_generation_limit(
    make_spec: Callable[..., dict[str, Any]],
) -> None:
    from dflash_operator.api.constants import Gate
    from dflash_operator.api.validation import parse_spec

    spec = parse_spec(with_canary(make_spec))
    args = build_audit_args(spec, Gate.CANARY, "s3://artifacts/ml/r1/uid")

    assert args[3:6] == ["s3://artifacts/ml/r1/uid/canary/regen", "--out",
                         "s3://artifacts/ml/r1/uid/audit/canary"]  # fmt: skip
    assert args[args.index("--gate") + 1] == "completions"
    assert args[args.index("--max-new-tokens") + 1] == "3072"


def test_a_plain_retry_of_a_failed_canary_starts_over_from_the_canarys_answers(
    sim: Callable[..., Any], make_spec: Callable[..., dict[str, Any]]
) -> None:
    world = failed_canary(sim, make_spec)
    world.step(lambda body: body["metadata"]["annotations"].update({"dflash.dev/retry": "fixed"}))
    world.settle()

    assert world.created[-1] == "r1-canary-2"
    assert world.status["phase"] == "Canary"
    assert "audit" not in world.status or world.status["audit"].get("canary") is None
