"""The pure parts of `kubectl dflash`: durations, check wording, stage states from conditions,
kubelet detection and retry values (the commands themselves run in tests/integration/plugin)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dflash_operator.api.constants import ConditionStatus, ConditionType, Phase, Reason, Stage
from dflash_operator.api.status import DFlashRunStatus, build_condition
from dflash_operator.api.status_parts import (
    AuditViolation,
    ModelCopyResult,
    RegenerationProgress,
    StageProgress,
)
from dflash_operator.cli.annotate import build_retry
from dflash_operator.cli.audit import violation_text
from dflash_operator.cli.errors import CliError
from dflash_operator.cli.logs import no_kubelet_reason
from dflash_operator.cli.render import human_duration
from dflash_operator.cli.summary import StageState, summarize

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59.4, "59s"), (60, "1m"), (3599, "59m"), (3600, "1h"), (27_929, "7h 45m"),
     (86_400, "1d"), (2 * 86_400 + 3 * 3600 + 59, "2d 3h"), (-5, "0s")],
)  # fmt: skip
def test_durations_read_like_kubectl_ages(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        ("maxStubRate", "maxStubRate  0.871 > 0.05"),
        ("minThinkingRate", "minThinkingRate  0.4 < 0.9"),
    ],
)
def test_min_checks_fail_below_and_max_checks_above_their_threshold(
    check: str, expected: str
) -> None:
    value, threshold = (0.871, 0.05) if check.startswith("max") else (0.4, 0.9)
    assert violation_text(AuditViolation(check=check, value=value, threshold=threshold)) == expected


@pytest.mark.parametrize(
    ("node", "blocked"),
    [
        (None, False),
        ({"metadata": {"annotations": {"kwok.x-k8s.io/node": "fake"}}}, True),
        ({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 0}}}}, True),
        ({"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}}, False),
        ({"status": {}}, False),
    ],
    ids=["unknown node", "kwok node", "port 0", "real kubelet", "no endpoint reported"],
)
def test_nodes_without_a_kubelet_are_recognised(node: dict[str, Any] | None, blocked: bool) -> None:
    assert (no_kubelet_reason(node) is not None) == blocked


def run_with(status: DFlashRunStatus) -> dict[str, Any]:
    return {
        "metadata": {"name": "r", "namespace": "ns", "generation": 1},
        "spec": {"target": {"model": "Qwen/Qwen3-8B"}},
        "status": status.to_api(),
    }


def condition(kind: ConditionType, status: ConditionStatus, reason: Reason, ago: float) -> Any:
    return build_condition(
        kind, status, reason, "m", generation=1, now=NOW - timedelta(seconds=ago)
    )


def test_a_stage_given_in_the_spec_is_skipped_and_the_next_one_runs() -> None:
    status = DFlashRunStatus(
        phase=Phase.AUDITING_COMPLETIONS,
        conditions=[
            condition(ConditionType.REGENERATED, ConditionStatus.TRUE, Reason.STAGE_SKIPPED, 60)
        ],
    )

    states = {line.stage: line.state for line in summarize(run_with(status), NOW).stages}

    assert states[Stage.REGEN] == StageState.SKIPPED
    assert states[Stage.AUDIT_COMPLETIONS] == StageState.RUNNING
    assert states[Stage.TOKENIZE] == StageState.WAITING


def test_the_model_copy_is_a_stage_only_for_runs_that_have_one() -> None:
    copying = DFlashRunStatus(phase=Phase.FETCHING_MODEL)
    states = {line.stage: line.state for line in summarize(run_with(copying), NOW).stages}
    assert states[Stage.MODEL] == StageState.RUNNING
    assert states[Stage.REGEN] == StageState.WAITING

    copied = DFlashRunStatus(
        phase=Phase.REGENERATING,
        conditions=[
            condition(ConditionType.MODEL_FETCHED, ConditionStatus.TRUE, Reason.STAGE_SUCCEEDED, 60)
        ],
        stages=StageProgress(
            model=ModelCopyResult(revision="3f" * 20, files=7, bytes=16_400_000_000)
        ),
    )
    lines = {line.stage: line for line in summarize(run_with(copied), NOW).stages}
    assert lines[Stage.MODEL].state == StageState.DONE
    assert "7 files" in lines[Stage.MODEL].detail and "16.4 GB" in lines[Stage.MODEL].detail
    assert lines[Stage.REGEN].state == StageState.RUNNING

    own = DFlashRunStatus(phase=Phase.REGENERATING)  # a target on S3: nothing to copy
    assert Stage.MODEL not in {line.stage for line in summarize(run_with(own), NOW).stages}


def test_a_suspended_run_marks_the_stage_it_paused() -> None:
    status = DFlashRunStatus(
        phase=Phase.SUSPENDED,
        conditions=[
            condition(ConditionType.REGENERATED, ConditionStatus.TRUE, Reason.STAGE_SUCCEEDED, 60)
        ],
    )

    summary = summarize(run_with(status), NOW)

    assert summary.current is not None
    assert (summary.current.stage, summary.current.state) == (
        Stage.AUDIT_COMPLETIONS,
        StageState.SUSPENDED,
    )


def test_regeneration_eta_is_scaled_from_the_time_since_the_stage_started() -> None:
    status = DFlashRunStatus(
        phase=Phase.REGENERATING,
        conditions=[
            condition(ConditionType.REGENERATED, ConditionStatus.FALSE, Reason.STAGE_RUNNING, 3600)
        ],
        stages=StageProgress(regeneration=RegenerationProgress(shards_done=16, shards_total=64)),
    )

    summary = summarize(run_with(status), NOW)

    assert summary.eta is not None
    assert summary.eta.seconds == pytest.approx(3 * 3600)
    assert summary.eta.basis == "estimated from regen progress"


def test_retry_without_a_stage_names_the_stage_that_failed() -> None:
    status = DFlashRunStatus(
        phase=Phase.FAILED,
        conditions=[
            condition(ConditionType.TOKENIZED, ConditionStatus.FALSE, Reason.STAGE_FAILED, 60)
        ],
    )

    change = build_retry(summarize(run_with(status), NOW), None, NOW)

    assert change.value == "tokenize-20260501T120000Z"


def test_retry_of_a_pending_run_is_refused() -> None:
    with pytest.raises(CliError, match="dflashrun r is Pending: only a Failed or AuditFailed"):
        build_retry(summarize(run_with(DFlashRunStatus(phase=Phase.PENDING)), NOW), None, NOW)
