"""GPU-hour accounting: requested GPUs x wall time of every pod of the run, from its start to
its end (now, while it runs), per `<stage>-<attempt>`, retries and replaced attempts included.

Pods go (a retry deletes a child, a TTL expires): each attempt's value is the largest ever
computed, so hours once seen are never lost. Running pods add time continuously; their share
is written at most every UPDATE_SECONDS so that a run at rest is not a status write per
resync (a pod that ends, or a new attempt, is written at once).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from dflash_operator.api.status_parts import GpuHours
from dflash_operator.plan.draft import Draft
from dflash_operator.plan.observed import POD_DONE_PHASES, Observed, PodView

UPDATE_SECONDS = 300.0
_DIGITS = 3


def pod_gpu_seconds(pod: PodView, now: datetime) -> tuple[float, bool]:
    """(GPU-seconds, whether the pod still runs)."""
    if not pod.gpus or pod.started_at is None:
        return 0.0, False
    running = pod.phase not in POD_DONE_PHASES
    end = now if running else None
    if pod.terminated is not None and pod.terminated.finished_at is not None:
        end, running = pod.terminated.finished_at, False
    if end is None:  # ended without a termination record (evicted, lost): not counted
        return 0.0, False
    return max((end - pod.started_at).total_seconds(), 0.0) * pod.gpus, running


def account(draft: Draft, observed: Observed) -> float:
    """Fold the pods' GPU time into status.gpuHours (see the module docstring); returns the
    total as of now (for the budget), which status may show up to UPDATE_SECONDS late."""
    seconds: dict[str, float] = defaultdict(float)
    running: set[str] = set()
    for pod in observed.pods:
        if pod.stage is None:
            continue
        key = f"{pod.stage.value}-{pod.attempt}"
        used, still = pod_gpu_seconds(pod, draft.now)
        if used:
            seconds[key] += used
        if still and used:
            running.add(key)
    old = draft.status.gpu_hours or GpuHours()
    by_attempt = dict(old.by_attempt or {})
    fresh = dict(by_attempt)
    for key, value in seconds.items():
        fresh[key] = max(fresh.get(key, 0.0), value / 3600.0)
    now_total = sum(fresh.values())
    due = old.updated_at is None or (draft.now - old.updated_at).total_seconds() >= UPDATE_SECONDS
    changed = False
    for key, value in seconds.items():
        hours = round(value / 3600.0, _DIGITS)
        if hours <= by_attempt.get(key, 0.0):
            continue
        # Only time passing on running pods: wait for the next update slot.
        if key in running and key in by_attempt and not due:
            continue
        by_attempt[key] = hours
        changed = True
    if not changed:
        return now_total
    by_stage: dict[str, float] = defaultdict(float)
    for key, hours in by_attempt.items():
        by_stage[key.rsplit("-", 1)[0]] += hours
    draft.status.gpu_hours = GpuHours(
        total=round(sum(by_attempt.values()), _DIGITS),
        by_stage={stage: round(hours, _DIGITS) for stage, hours in sorted(by_stage.items())},
        by_attempt=dict(sorted(by_attempt.items())),
        updated_at=draft.now,
    )
    return now_total
