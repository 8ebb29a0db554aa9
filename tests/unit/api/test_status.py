"""Status models build the patch the operator sends, and the printer-column strings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from dflash_operator.api.constants import ConditionStatus, ConditionType, Phase, Reason, Verdict
from dflash_operator.api.status import (
    DFlashRunStatus,
    build_condition,
    format_audit_verdict,
    format_count,
    format_node_pools,
    format_progress,
    upsert_condition,
)
from dflash_operator.api.status_parts import (
    AuditResult,
    AuditStatus,
    Condition,
    TrainingProgress,
)
from pydantic import ValidationError

T0 = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def _condition(status: ConditionStatus, when: datetime) -> Condition:
    return build_condition(
        ConditionType.TRAINED,
        status,
        Reason.STAGE_RUNNING,
        "train is running",
        generation=1,
        now=when,
    )


def test_the_patch_is_camel_case_and_leaves_unset_fields_out() -> None:
    status = DFlashRunStatus(
        phase=Phase.TRAINING,
        observed_generation=2,
        training=TrainingProgress(step=12000, total_steps=40000, loss=1.25),
    )
    assert status.to_api() == {
        "phase": "Training",
        "observedGeneration": 2,
        "training": {"step": 12000, "totalSteps": 40000, "loss": 1.25},
    }


def test_timestamps_are_written_in_utc_to_the_second() -> None:
    paris = timezone(timedelta(hours=2))
    status = DFlashRunStatus(start_time=T0.astimezone(paris))
    assert status.to_api() == {"startTime": "2026-05-01T12:00:00Z"}


def test_a_timestamp_without_a_time_zone_is_refused() -> None:
    with pytest.raises(ValidationError, match="time zone"):
        DFlashRunStatus(start_time=datetime(2026, 5, 1))  # noqa: DTZ001


def test_a_status_read_back_from_the_server_parses_into_the_same_model() -> None:
    sent = DFlashRunStatus(
        phase=Phase.AUDIT_FAILED,
        conditions=[_condition(ConditionStatus.FALSE, T0)],
        audit=AuditStatus(completions=AuditResult(verdict=Verdict.FAIL, metrics={"stub": 0.87})),
    )
    again = DFlashRunStatus.model_validate(sent.to_api())
    assert again.to_api() == sent.to_api()
    assert again.condition(ConditionType.TRAINED) is not None


def test_an_unknown_status_key_from_a_newer_operator_is_ignored() -> None:
    status = DFlashRunStatus.model_validate({"phase": "Training", "futureField": 1})
    assert status.phase is Phase.TRAINING


def test_upserting_the_same_status_keeps_the_transition_time() -> None:
    first = [_condition(ConditionStatus.TRUE, T0)]
    later = upsert_condition(first, _condition(ConditionStatus.TRUE, T0 + timedelta(hours=1)))
    assert len(later) == 1
    assert later[0].last_transition_time == T0


def test_upserting_a_new_status_moves_the_transition_time() -> None:
    first = [_condition(ConditionStatus.TRUE, T0)]
    later = upsert_condition(first, _condition(ConditionStatus.FALSE, T0 + timedelta(hours=1)))
    assert later[0].status is ConditionStatus.FALSE
    assert later[0].last_transition_time == T0 + timedelta(hours=1)


def test_upserting_a_new_type_appends_it() -> None:
    other = build_condition(
        ConditionType.SUSPENDED,
        ConditionStatus.FALSE,
        Reason.NOT_SUSPENDED,
        Reason.NOT_SUSPENDED.message(),
        generation=1,
        now=T0,
    )
    merged = upsert_condition([_condition(ConditionStatus.TRUE, T0)], other)
    assert [c.type for c in merged] == ["Trained", "Suspended"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (999, "999"),
        (1000, "1k"),
        (412_345, "412k"),
        (1_600_000_000, "1.6G"),
        (2_000_000, "2M"),
    ],
)
def test_counts_are_shortened_for_the_progress_column(value: int, text: str) -> None:
    assert format_count(value) == text


def test_progress_reads_like_the_issue_examples() -> None:
    assert format_progress("regen", 412_000, 902_000) == "regen 412k/902k"
    assert format_progress("train", 12000, 40000, exact=True) == "train 12000/40000"
    assert format_progress("tokenize", 5000, None) == "tokenize 5k"


def test_audit_verdicts_list_the_gates_that_ran_and_approvals() -> None:
    audit = AuditStatus(
        completions=AuditResult(verdict=Verdict.FAIL, approved=True),
        tokens=AuditResult(verdict=Verdict.PASS),
    )
    assert format_audit_verdict(audit) == "completions=approved tokens=pass"
    assert format_audit_verdict(AuditStatus()) is None
    assert format_node_pools({"regen": "b200", "train": "rtx-pro-6000"}) == (
        "regen=b200 train=rtx-pro-6000"
    )
