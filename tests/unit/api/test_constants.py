"""The shared vocabulary: terminal phases, reason templates and their Kubernetes constraints."""

from __future__ import annotations

import re
import string

import pytest
from dflash_operator.api.constants import (
    ANNOTATION_APPROVE_AUDIT,
    ANNOTATION_RETRY,
    CONDITION_MEANINGS,
    CONDITION_REASON_PATTERN,
    LABEL_ATTEMPT,
    LABEL_RUN,
    LABEL_STAGE,
    PHASE_MEANINGS,
    ConditionType,
    Phase,
    Reason,
)


def test_only_succeeded_and_failed_are_terminal() -> None:
    assert {phase for phase in Phase if phase.is_terminal()} == {Phase.SUCCEEDED, Phase.FAILED}
    assert not Phase.AUDIT_FAILED.is_terminal()


@pytest.mark.parametrize("reason", list(Reason), ids=[r.value for r in Reason])
def test_every_reason_is_a_valid_condition_reason_with_a_template(reason: Reason) -> None:
    assert re.fullmatch(CONDITION_REASON_PATTERN, reason.value)
    assert reason.value[0].isupper()
    assert reason.template


def test_a_message_is_the_template_filled_in() -> None:
    message = Reason.STAGE_FAILED.message(stage="regen", attempt=2, error="OOMKilled")
    assert message == "regen failed on attempt 2: OOMKilled"


def test_a_missing_template_field_is_an_error_not_a_half_empty_message() -> None:
    with pytest.raises(KeyError, match="attempt"):
        Reason.STAGE_FAILED.message(stage="regen", error="OOMKilled")


def test_the_audit_failure_message_tells_how_to_accept_the_gate() -> None:
    fields = {n for _, n, _, _ in string.Formatter().parse(Reason.AUDIT_FAILED.template) if n}
    assert fields == {"gate", "violations", "report_uri", "run", "generation"}
    message = Reason.AUDIT_FAILED.message(
        gate="completions",
        violations="maxStubRate: 0.87 > 0.05",
        report_uri="s3://b/r/audit/completions/",
        run="r",
        generation=3,
    )
    assert f"{ANNOTATION_APPROVE_AUDIT}=completions@3" in message
    assert ANNOTATION_RETRY in message


def test_every_phase_and_condition_type_is_documented() -> None:
    assert set(PHASE_MEANINGS) == set(Phase)
    assert set(CONDITION_MEANINGS) == set(ConditionType)


def test_keys_live_under_the_api_group() -> None:
    for key in (ANNOTATION_RETRY, ANNOTATION_APPROVE_AUDIT, LABEL_RUN, LABEL_STAGE, LABEL_ATTEMPT):
        assert key.startswith("dflash.dev/")
