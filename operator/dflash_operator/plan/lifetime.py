"""A run's lifetime limits: spec.activeDeadlineSeconds (the whole run, from its first stage),
ttlSecondsAfterFinished (its finished workloads), and stopping what a failed run still runs.
Pure; per-stage deadlines are the children's own (`activeDeadlineSeconds`).
"""

from __future__ import annotations

from datetime import timedelta

from dflash_operator.api.constants import STAGE_PHASES, Reason
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.children.kinds import WORKLOAD_KINDS
from dflash_operator.plan import outcomes
from dflash_operator.plan.actions import DeleteChild
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import Observed


def stop_running_children(draft: Draft, observed: Observed) -> None:
    """A failed run keeps no pod: its unfinished Jobs / PyTorchJobs are deleted (their pods go
    with them; finished ones stay for inspection). No GPU is held for a run that failed."""
    for child in observed.children:
        if child.kind in WORKLOAD_KINDS and not child.finished.done and not child.deleting:
            draft.act(DeleteChild(child.kind, child.name))


def past_run_deadline(spec: DFlashRunSpec, draft: Draft) -> bool:
    """spec.activeDeadlineSeconds, counted from the first stage's start: past it, the run
    fails naming the stage it was in (`_requeue_at_run_deadline` looks again when it is due)."""
    seconds, started = spec.active_deadline_seconds, draft.status.start_time
    if seconds is None or started is None:
        return False
    if draft.now < started + timedelta(seconds=seconds):
        return False
    # From the phase, not the children: the plan after the deletion must say the same.
    phase = draft.status.phase
    stage = next((s.value for s, p in STAGE_PHASES.items() if p == phase), "between stages")
    message = Reason.DEADLINE_EXCEEDED.message(
        seconds=seconds, started=started.strftime("%Y-%m-%dT%H:%M:%SZ"), stage=stage
    )
    outcomes.fail_run(draft, Reason.DEADLINE_EXCEEDED, message)
    return True


def requeue_at_run_deadline(spec: DFlashRunSpec, draft: Draft) -> None:
    seconds, started = spec.active_deadline_seconds, draft.status.start_time
    phase = draft.status.phase
    if seconds is not None and started is not None and not (phase and phase.is_terminal()):
        due = started + timedelta(seconds=seconds)
        draft.requeue(max((due - draft.now).total_seconds(), 0.0))


def expire_children(spec: DFlashRunSpec, draft: Draft, observed: Observed) -> None:
    """ttlSecondsAfterFinished: delete the finished run's workloads once it expires."""
    ttl = spec.ttl_seconds_after_finished
    done_at = draft.status.completion_time
    if ttl is None or done_at is None:
        return
    due = done_at + timedelta(seconds=ttl)
    if draft.now < due:
        draft.requeue((due - draft.now).total_seconds())
        return
    for child in observed.children:
        if child.kind in WORKLOAD_KINDS and not child.deleting:
            draft.act(DeleteChild(child.kind, child.name))
