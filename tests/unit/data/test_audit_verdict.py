"""Verdicts: overall and per-source comparisons, small sources, ordering, termination summaries."""

from __future__ import annotations

import json

import pytest
from dflash_trainer.data.audit.checks import evaluate
from dflash_trainer.data.audit.metrics import GateMetrics, GroupMetrics
from dflash_trainer.data.audit.thresholds import Thresholds, parse_thresholds
from dflash_trainer.data.errors import BadInputError
from dflash_trainer.data.stage_result import MAX_MESSAGE_BYTES, build_termination_message


def gate(
    overall: dict[str, float], sources: dict[str, tuple[int, dict[str, float]]]
) -> GateMetrics:
    groups = {
        n: GroupMetrics(samples=s, values={"samples": float(s), **v})
        for n, (s, v) in sources.items()
    }
    total = sum(s for s, _ in sources.values())
    return GateMetrics(
        "completions", GroupMetrics(total, {"samples": float(total), **overall}), groups
    )


@pytest.mark.parametrize(
    ("overall", "source_value", "source_samples", "failed", "named"),
    [
        (0.01, 0.01, 100, False, []),  # everything under the limit
        (0.20, 0.20, 100, True, ["a"]),  # over the limit everywhere
        (0.03, 0.50, 100, True, ["a"]),  # overall fine, one large source broken
        (0.03, 0.50, 5, False, []),  # a broken source too small to judge
    ],
)
def test_a_max_check_fails_overall_or_per_source_with_enough_samples(
    overall: float, source_value: float, source_samples: int, failed: bool, named: list[str]
) -> None:
    metrics = gate({"stub_rate": overall}, {"a": (source_samples, {"stub_rate": source_value})})
    verdict = evaluate(metrics, Thresholds())
    assert verdict.passed is not failed
    if failed:
        (violation,) = verdict.violations
        assert violation.check == "stub_rate" and violation.sources == named
        assert violation.threshold == Thresholds().max_stub_rate


def test_violations_are_ordered_most_severe_first_and_messages_name_value_limit_and_sources() -> (
    None
):
    metrics = gate(
        {"stub_rate": 0.06, "truncation_rate": 0.5},
        {"big": (1000, {"stub_rate": 0.06, "truncation_rate": 0.5})},
    )
    verdict = evaluate(metrics, Thresholds())
    assert [v.check for v in verdict.violations] == ["truncation_rate", "stub_rate"]
    assert verdict.violations[0].message == (
        "truncation_rate: 50.0% of generations hit maxTokens (above the limit 5.0%); sources: big 50.0%"
    )


def test_checks_without_a_metric_are_listed_as_skipped_not_passed() -> None:
    verdict = evaluate(gate({"stub_rate": 0.0}, {}), Thresholds())
    assert "stub_rate" in verdict.evaluated and "empty_response_rate" in verdict.skipped


def test_thresholds_accept_camel_case_and_reject_unknown_keys_with_the_field_name() -> None:
    assert parse_thresholds({"maxStubRate": 0.2}, "t.yaml").max_stub_rate == 0.2
    with pytest.raises(BadInputError, match=r"t.yaml: maxStubRat: Extra inputs"):
        parse_thresholds({"maxStubRat": 0.2}, "t.yaml")
    with pytest.raises(
        BadInputError, match=r"maxStubRate: Input should be less than or equal to 1"
    ):
        parse_thresholds({"maxStubRate": 2}, "t.yaml")


def test_every_threshold_has_a_description_and_a_camel_case_alias() -> None:
    for name, field in Thresholds.model_fields.items():
        assert field.description, name
        assert field.alias and "_" not in field.alias


def test_the_termination_message_always_fits_in_4_kb_and_keeps_the_verdict() -> None:
    violations = [
        {"check": f"c{i}", "message": "x" * 1000, "perSource": {"s": 1.0}} for i in range(40)
    ]
    payload = {
        "stage": "audit",
        "ok": False,
        "verdict": "fail",
        "message": "m" * 5000,
        "violations": violations,
    }
    text = build_termination_message(payload)
    data = json.loads(text)
    assert len(text.encode()) <= MAX_MESSAGE_BYTES
    assert data["verdict"] == "fail" and data["violations"][0]["check"] == "c0"
    assert data["violationsTruncated"] is True and "perSource" not in data["violations"][0]


@pytest.mark.parametrize(
    ("message", "fixable"),
    [
        ("s3://b/k does not exist", True),
        ("access to s3://b/k was refused (AccessDenied): check the credentials Secret", True),
        ("reading s3://b/k failed: Could not connect to the endpoint URL", False),
        ("listing s3://b/p failed: SlowDown", False),
    ],
)
def test_missing_objects_and_refused_credentials_are_bad_input_while_outages_are_retried(
    message: str, fixable: bool
) -> None:
    from dflash_trainer.data.errors import is_user_fixable
    from dflash_trainer.storage import StorageError

    assert is_user_fixable(StorageError(message)) is fixable
