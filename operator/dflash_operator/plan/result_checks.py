"""Fail closed on stage results: a child that ended well but whose result (the termination
message) cannot be read or validated is a failure with its own reason, never a success.
Reading the results into status lives in `results.py`; this module only judges them. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dflash_operator.api.constants import STAGE_CONDITIONS, ConditionStatus, Reason, Stage, Verdict
from dflash_operator.plan import outcomes, results
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import ChildView, PodView
from dflash_operator.plan.stages import STAGE_GATES, StageContext

# The kubelet keeps at most this many bytes of a termination message (the rest is cut).
KUBELET_MESSAGE_LIMIT = 4096
VERDICTS = (Verdict.PASS.value, Verdict.FAIL.value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _unparsed(message: str | None) -> str:
    if not message:
        return "the termination message is empty"
    size = len(message.encode())
    cut = ", cut at the kubelet's 4096-byte limit" if size >= KUBELET_MESSAGE_LIMIT else ""
    return f"the termination message is not a JSON object ({size} bytes{cut})"


def _field_problem(stage: Stage, data: dict[str, Any]) -> str | None:
    """What a readable result lacks for its stage, else None."""
    if stage in STAGE_GATES:
        verdict = data.get("verdict")
        if verdict not in VERDICTS:
            return f"verdict is {verdict!r}; accepted: {', '.join(VERDICTS)}"
        return None
    if data.get("ok") is False:
        return "ok is false although the container exited 0; accepted: true"
    if stage == Stage.TRAIN:
        uri = data.get("finalUri")
        if not isinstance(uri, str) or not uri:
            return f"finalUri is {uri!r}; accepted: the exported drafter's URI"
    if stage == Stage.EVAL and not _is_number(data.get("acceptanceLength")):
        value = data.get("acceptanceLength")
        return f"acceptanceLength is {value!r}; accepted: a finite number"
    return None


# Stages whose result carries a verdict or a product the next stage relies on.
CHECKED_STAGES = frozenset({*STAGE_GATES, Stage.TRAIN, Stage.EVAL})


def describe_result_problem(stage: Stage, pods: Sequence[PodView]) -> str | None:
    """Why the finished stage's result cannot be used (naming the pod), else None."""
    if stage not in CHECKED_STAGES:
        return None
    data, term = results.latest_result(pods)
    if term is None:
        return "no finished pod reported a result"
    finished = [p for p in pods if p.terminated is term]
    pod = finished[0].name if finished else "?"
    problem = _unparsed(term.message) if data is None else _field_problem(stage, data)
    return f"pod {pod}: {problem}" if problem else None


def record_unreadable_result(
    draft: Draft, run: str, stage: Stage, attempt: int, problem: str
) -> None:
    """The stage and the run fail with StageResultUnreadable (nothing of the result is used)."""
    reason = Reason.STAGE_RESULT_UNREADABLE
    message = reason.message(stage=stage.value, attempt=attempt, problem=problem, run=run)
    draft.set_condition(
        STAGE_CONDITIONS[stage], ConditionStatus.FALSE, reason, message, announce=False
    )
    outcomes.fail_run(draft, reason, message)


def record_finished(
    ctx: StageContext,
    draft: Draft,
    stage: Stage,
    attempt: int,
    child: ChildView,
    pods: Sequence[PodView],
) -> bool:
    """A finished child into status: success, gate verdict or failure (a succeeded child with
    a result that cannot be used fails closed); True when the stage succeeded."""
    problem = describe_result_problem(stage, pods) if child.finished.ok else None
    if problem is not None:
        record_unreadable_result(draft, ctx.run.name, stage, attempt, problem)
        return False
    if child.finished.ok and stage not in STAGE_GATES:
        return outcomes.record_success(ctx, draft, stage, attempt, child, pods)
    if stage in STAGE_GATES:
        return outcomes.record_audit(ctx, draft, stage, attempt, child, pods)
    outcomes.record_failure(ctx, draft, stage, attempt, child, pods)
    return False
