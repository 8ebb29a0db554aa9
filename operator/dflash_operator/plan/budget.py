"""The run's GPU-hour budget: spec.budget.maxGpuHours plus the extra-gpu-hours annotation,
whether it ran out, and the BudgetExceeded condition. Pure; the hours themselves are
counted in `gpu_hours.py`, and what an exhausted budget does (suspend) in the planner.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dflash_operator.api.constants import (
    ANNOTATION_EXTRA_GPU_HOURS,
    ConditionStatus,
    ConditionType,
    Reason,
    Stage,
)
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.children.meta import RunRef
from dflash_operator.plan.draft import Draft


def budget_of(
    spec: DFlashRunSpec, annotations: Mapping[str, str]
) -> tuple[float | None, str | None]:
    """(spec.budget.maxGpuHours plus the extra-gpu-hours annotation, or None: no budget; what
    was wrong with the annotation, said in the BudgetExceeded condition)."""
    limit = spec.budget.max_gpu_hours
    raw = annotations.get(ANNOTATION_EXTRA_GPU_HOURS)
    if limit is None or raw is None:
        return limit, None
    try:
        extra = float(raw)
    except ValueError:
        extra = math.nan
    if not math.isfinite(extra) or extra < 0:
        return limit, (
            f"ignored: {ANNOTATION_EXTRA_GPU_HOURS}={raw!r} is not accepted: a number of "
            "GPU-hours, 0 or more (e.g. 250)"
        )
    return limit + extra, None


def budget_message(
    used: float, budget: float | None, over: bool, current: Stage | None, run: RunRef
) -> str | None:
    """Why the budget stopped the run (None: it did not). `used` is as of now: once stopped,
    no pod adds to it, so the message is stable."""
    if budget is None or not over:
        return None
    return Reason.BUDGET_EXCEEDED.message(
        used=used, budget=budget, stage=current.value if current else "the run", run=run.name
    )


def sync_budget_condition(
    draft: Draft, budget: float, over_message: str | None, problem: str | None
) -> None:
    if over_message is not None:
        draft.set_condition(
            ConditionType.BUDGET_EXCEEDED, ConditionStatus.TRUE, Reason.BUDGET_EXCEEDED,
            over_message, announce=False,
        )  # fmt: skip
        return
    # The status total (written at most every 5 minutes), not the live one: no write per pass.
    used = draft.status.gpu_hours.total if draft.status.gpu_hours else 0.0
    message = Reason.WITHIN_BUDGET.message(used=used, budget=budget)
    draft.set_condition(
        ConditionType.BUDGET_EXCEEDED, ConditionStatus.FALSE, Reason.WITHIN_BUDGET,
        f"{message}; {problem}" if problem else message, announce=False,
    )  # fmt: skip
