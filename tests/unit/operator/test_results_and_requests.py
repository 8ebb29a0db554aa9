"""Stage results from termination messages, and user requests from annotations."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from dflash_operator.api.annotations import AuditApproval
from dflash_operator.api.constants import Gate, Stage
from dflash_operator.api.status_parts import AuditViolation
from dflash_operator.plan.observed import PodView, Termination
from dflash_operator.plan.outcomes import describe_violation
from dflash_operator.plan.requests import find_approval, parse_approvals, parse_retry
from dflash_operator.plan.results import (
    build_audit_result,
    describe_failure,
    parse_result,
    summarize_regeneration,
)

NOW = datetime(2026, 5, 1, tzinfo=UTC)


def pod(
    name: str,
    message: str | None,
    exit_code: int = 0,
    index: int | None = None,
    phase: str = "Succeeded",
    at: int = 0,
) -> PodView:
    term = Termination(
        exit_code=exit_code, message=message, finished_at=datetime(2026, 5, 1, 0, 0, at, tzinfo=UTC)
    )
    return PodView(
        name=name, uid=name, owner_name="r1-x", index=index, phase=phase, terminated=term
    )


@pytest.mark.parametrize(
    "message", [None, "", "Traceback (most recent call last):", "[1, 2]", "{broken"]
)
def test_a_termination_message_that_is_not_a_json_object_is_no_result(message: str | None) -> None:
    assert parse_result(message) is None


def test_regeneration_sums_the_results_of_succeeded_shards_only() -> None:
    pods = [
        pod("a", json.dumps({"samples": 10, "outputTokens": 100, "skipped": True}), index=0),
        pod("b", json.dumps({"samples": 20, "outputTokens": 200}), index=1),
        pod("c", json.dumps({"samples": 99}), exit_code=1, index=2, phase="Failed"),
    ]
    summary = summarize_regeneration(pods, shards=3)
    assert (summary.shards_done, summary.shards_total, summary.shards_skipped) == (2, 3, 1)
    assert (summary.samples, summary.output_tokens) == (30, 300)


@pytest.mark.parametrize(
    ("message", "job_ok", "exit_code", "verdict"),
    [
        (json.dumps({"verdict": "fail"}), True, 0, "fail"),
        (json.dumps({"verdict": "pass"}), False, 1, "pass"),
        (None, True, 0, "pass"),
        (None, False, 3, "fail"),
        ("logs, not JSON", False, 3, "fail"),
        (None, False, 1, None),
    ],
)
def test_the_gate_verdict_comes_from_the_result_else_from_the_exit_code(
    message: str | None, job_ok: bool, exit_code: int, verdict: str | None
) -> None:
    result = build_audit_result(
        Gate.COMPLETIONS,
        [pod("a", message, exit_code)],
        job_ok=job_ok,
        generation=4,
        attempt=2,
        now=NOW,
    )
    assert (result.verdict.value if result else None) == verdict
    if result:
        assert (result.observed_generation, result.attempt) == (4, 2)


def test_a_violation_names_the_spec_field_that_sets_its_threshold() -> None:
    message = json.dumps(
        {
            "verdict": "fail",
            "violations": [
                {"check": "truncation_rate", "thresholdField": "maxTruncationRate", "value": 0.4},
                {"check": "stub_rate", "thresholdField": "maxStubRate", "value": 0.9},
                {"check": "future_check", "thresholdField": "maxFuture", "value": 1},
            ],
        }
    )
    result = build_audit_result(
        Gate.COMPLETIONS, [pod("a", message, 3)], job_ok=False, generation=1, attempt=1, now=NOW
    )
    assert result is not None
    assert [v.threshold_field for v in result.violations or []] == [
        "spec.audit.completions.maxTruncationRate",
        "spec.audit.maxStubRate",
        None,
    ]


def test_violations_that_do_not_parse_are_skipped_not_fatal() -> None:
    message = json.dumps(
        {
            "verdict": "fail",
            "violations": [{"check": "maxStubRate", "value": 0.5}, {"value": "no check"}, "junk"],
        }
    )
    result = build_audit_result(
        Gate.TOKENS, [pod("a", message, 3)], job_ok=False, generation=1, attempt=1, now=NOW
    )
    assert result is not None and [v.check for v in result.violations or []] == ["maxStubRate"]


@pytest.mark.parametrize(
    ("violation", "text"),
    [
        (
            AuditViolation(
                check="stub_rate",
                value=0.871,
                threshold=0.05,
                message="stub_rate: 87.1% of samples are stubs (above the limit 5.0%)",
                threshold_field="spec.audit.maxStubRate",
            ),
            "stub_rate: 87.1% of samples are stubs (above the limit 5.0%) [spec.audit.maxStubRate]",
        ),
        (
            AuditViolation(
                check="stub_rate", value=0.871, threshold=0.05,
                threshold_field="spec.audit.maxStubRate",
            ),
            "stub_rate: 87.1% > 5% [spec.audit.maxStubRate]",
        ),
        (
            AuditViolation(
                check="supervised_tokens", value=12, threshold=1000,
                threshold_field="spec.audit.tokens.minSupervisedTokens",
            ),
            "supervised_tokens: 12 < 1000 [spec.audit.tokens.minSupervisedTokens]",
        ),
        (
            AuditViolation(
                check="supervised_fraction", value=0.01, threshold=0.05,
                threshold_field="spec.audit.tokens.minSupervisedFraction",
            ),
            "supervised_fraction: 1% < 5% [spec.audit.tokens.minSupervisedFraction]",
        ),
        (
            AuditViolation(check="stub_rate", value=0.871, threshold=0.05),
            "stub_rate: 87.1% > 5%",
        ),
    ],
)  # fmt: skip
def test_a_violation_reads_as_value_against_threshold(violation: AuditViolation, text: str) -> None:
    assert describe_violation(violation) == text


def test_the_latest_failure_is_described_with_its_pod_exit_code_and_message() -> None:
    pods = [
        pod("old", json.dumps({"message": "first"}), exit_code=1, phase="Failed", at=1),
        pod("new", json.dumps({"message": "NCCL timeout"}), exit_code=1, phase="Failed", at=9),
    ]
    assert describe_failure(pods, "fallback") == "pod new exited 1: NCCL timeout"
    assert describe_failure([], "the Job failed") == "the Job failed"


@pytest.mark.parametrize(
    ("value", "last", "stage"),
    [
        ("anything", None, None),
        ("regen", None, Stage.REGEN),
        ("regen:2", "regen", Stage.REGEN),
        ("completions@x", None, Stage.AUDIT_COMPLETIONS),
        ("audit-tokens", None, Stage.AUDIT_TOKENS),
    ],
)
def test_a_new_retry_value_is_a_request_and_may_name_a_stage(
    value: str, last: str | None, stage: Stage | None
) -> None:
    request, problem = parse_retry({"dflash.dev/retry": value}, last)
    assert problem is None
    assert request is not None and request.token == value and request.stage == stage


@pytest.mark.parametrize(
    ("annotations", "last"),
    [({}, None), ({"dflash.dev/retry": "x"}, "x"), ({"dflash.dev/retry": "  "}, None)],
)
def test_an_absent_or_already_handled_retry_is_no_request(
    annotations: dict[str, str], last: str | None
) -> None:
    assert parse_retry(annotations, last) == (None, None)


def test_an_overlong_retry_value_is_a_problem_not_a_request() -> None:
    request, problem = parse_retry({"dflash.dev/retry": "x" * 300}, None)
    assert request is None
    assert problem is not None and "at most 253" in problem


def test_approvals_name_gate_and_generation_and_match_only_that_failure() -> None:
    approvals, problems = parse_approvals({"dflash.dev/approve-audit": "completions@3, tokens@5"})
    assert (approvals, problems) == (
        [AuditApproval(Gate.COMPLETIONS, 3), AuditApproval(Gate.TOKENS, 5)],
        [],
    )
    assert find_approval(approvals, Gate.COMPLETIONS, 3) is not None
    assert find_approval(approvals, Gate.COMPLETIONS, 2) is None
    assert find_approval(approvals, Gate.TOKENS, 3) is None


@pytest.mark.parametrize("value", ["completions", "bogus@1", "tokens@x"])
def test_a_malformed_approval_is_reported_with_its_value(value: str) -> None:
    approvals, problems = parse_approvals({"dflash.dev/approve-audit": value})
    assert approvals == []
    assert len(problems) == 1 and repr(value) in problems[0]
