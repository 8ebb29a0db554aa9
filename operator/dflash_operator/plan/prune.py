"""cleanupPolicy DeleteIntermediate: once a run has succeeded, one `<run>-prune` Job deletes
its regenerated and tokenized data and every checkpoint but the newest, and the `CleanedUp`
condition says how that went. The only child a finished run ever creates, exactly once; a
failure is reported (Warning) and never fails the run: the drafter is already there.
"""

from __future__ import annotations

from dflash_operator.api.constants import (
    CLEANUP_SCOPES,
    ConditionStatus,
    ConditionType,
    Reason,
    Stage,
)
from dflash_operator.api.naming import child_name
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.spec_storage import CleanupPolicy
from dflash_operator.children.meta import RunRef, build_run_root
from dflash_operator.plan.actions import CreateChild
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import Observed
from dflash_operator.plan.placement import Placement, place_stage
from dflash_operator.plan.results import describe_failure, latest_result
from dflash_operator.plan.stages import PlanSettings, StageContext, build_cleanup_child
from dflash_operator.pools import PoolsConfig

_POLICY = CleanupPolicy.DELETE_INTERMEDIATE
_SCOPE = CLEANUP_SCOPES[_POLICY.value]
# Reasons after which the prune is over for good (sticky, like the run's own phase).
_FINAL_REASONS = frozenset({Reason.ARTIFACTS_DELETED.value, Reason.CLEANUP_FAILED.value})


def _fail(draft: Draft, root: str, error: str) -> None:
    message = Reason.CLEANUP_FAILED.message(
        what=_SCOPE, root=root, policy=_POLICY.value, error=error
    )
    draft.set_condition(
        ConditionType.CLEANED_UP, ConditionStatus.FALSE, Reason.CLEANUP_FAILED, message
    )


def _started(draft: Draft, name: str, root: str) -> None:
    message = Reason.CLEANUP_STARTED.message(job=name, what=_SCOPE, root=root, policy=_POLICY.value)
    draft.set_condition(
        ConditionType.CLEANED_UP, ConditionStatus.UNKNOWN, Reason.CLEANUP_STARTED, message
    )


def prune_after_success(
    run: RunRef,
    spec: DFlashRunSpec,
    draft: Draft,
    observed: Observed,
    pools: PoolsConfig,
    settings: PlanSettings,
) -> None:
    """Start, follow and record the prune Job of a succeeded run (no-op for other policies)."""
    if spec.storage.cleanup_policy != _POLICY:
        return
    condition = draft.condition(ConditionType.CLEANED_UP)
    if condition is not None and condition.reason in _FINAL_REASONS:
        return
    root = build_run_root(spec.storage, run)
    name = child_name(run.name, Stage.PRUNE)
    child = observed.child("Job", name)
    if child is not None and not child.deleting:
        draft.record_child(child)
        if not child.finished.done:
            if condition is None:  # created in this pass, or adopted after a crash
                _started(draft, name, root)
            return
        pods = observed.pods_of(child)
        if not child.finished.ok:
            _fail(
                draft, root, f"Job {name} failed: {describe_failure(pods, child.finished.message)}"
            )
            return
        result, _term = latest_result(pods)
        summary = str((result or {}).get("message") or "done")
        message = Reason.ARTIFACTS_DELETED.message(
            job=name, what=_SCOPE, root=root, summary=summary
        )
        draft.set_condition(
            ConditionType.CLEANED_UP, ConditionStatus.TRUE, Reason.ARTIFACTS_DELETED, message
        )
        return
    if condition is not None and draft.recorded("Job", name) is not None:
        _fail(draft, root, f"Job {name} disappeared before it finished")
        return
    failure = observed.failure("Job", name)
    if failure is not None:
        if failure.permanent:
            _fail(draft, root, f"could not create Job {name}: {failure.message}")
        else:
            draft.event(
                Reason.CLEANUP_FAILED, f"could not create Job {name} yet: {failure.message}"
            )
        return
    placed = place_stage(spec, Stage.PRUNE, pools)
    if not isinstance(placed, Placement):
        _fail(draft, root, placed.message)
        return
    ctx = StageContext(run, spec, root, {Stage.PRUNE: placed}, settings)
    draft.act(CreateChild(build_cleanup_child(ctx, _POLICY), Stage.PRUNE))
    _started(draft, name, root)
