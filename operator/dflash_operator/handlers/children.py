"""Watches on the runs' children (Jobs, PyTorchJobs, TrainJobs and their JobSets, ConfigMaps,
pods, labelled by us):
in-memory indexes keyed by (namespace, run) for the reconciler, and a nudge to reconcile the
owning run on every change. Async and pure computation: no API calls, no threads.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import kopf

from dflash_operator.api.constants import (
    GROUP,
    LABEL_MANAGED_BY,
    LABEL_RUN,
    MANAGED_BY,
    PLURAL,
    VERSION,
)
from dflash_operator.children.kinds import summarize_child, summarize_jobset, summarize_pod

OURS = {LABEL_MANAGED_BY: MANAGED_BY}
Entry = dict[tuple[str, str], Any]


def _entry(namespace: str | None, labels: kopf.Labels, value: Any) -> Entry:
    run = labels.get(LABEL_RUN)
    if not namespace or not run or value is None:
        return {}
    return {(namespace, run): value}


@kopf.index("batch", "v1", "jobs", labels=OURS)
async def dflash_jobs(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> Entry:
    return _entry(namespace, labels, summarize_child(body))


@kopf.index("kubeflow.org", "v1", "pytorchjobs", labels=OURS)
async def dflash_pytorchjobs(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> Entry:
    return _entry(namespace, labels, summarize_child(body))


@kopf.index("trainer.kubeflow.org", "v1alpha1", "trainjobs", labels=OURS)
async def dflash_trainjobs(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> Entry:
    return _entry(namespace, labels, summarize_child(body))


@kopf.index("jobset.x-k8s.io", "v1alpha2", "jobsets", labels=OURS)
async def dflash_jobsets(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> Entry:
    """JobSet UID -> TrainJob UID (our labels reach the JobSet through the runtime patch)."""
    return _entry(namespace, labels, summarize_jobset(body))


@kopf.index("", "v1", "configmaps", labels=OURS)
async def dflash_configmaps(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> Entry:
    return _entry(namespace, labels, summarize_child(body))


@kopf.index("", "v1", "pods", labels=OURS)
async def dflash_pods(
    body: kopf.Body, namespace: str | None, labels: kopf.Labels, **_: Any
) -> Entry:
    return _entry(namespace, labels, summarize_pod(body))


@kopf.index(GROUP, VERSION, PLURAL)
async def dflash_runs(
    namespace: str | None, name: str | None, status: kopf.Status, meta: kopf.Meta, **_: Any
) -> Entry:
    """Run key -> (phase, status lags the spec): for the resync loop and the per-phase metric."""
    if not namespace or not name:
        return {}
    return {(namespace, name): build_run_entry(status, meta)}


class RunEntry(NamedTuple):
    """What the resync loop and the per-run metrics need of a run."""

    phase: str | None
    lagging: bool  # status.observedGeneration is behind metadata.generation
    gpu_hours: float = 0.0
    # status.training.likelihood.sources: source -> (scored rows, off-distribution rate)
    likelihood: tuple[tuple[str, int, float], ...] = ()


def build_run_entry(status: Any, meta: Any) -> RunEntry:
    observed = status.get("observedGeneration")
    generation = meta.get("generation")
    lagging = isinstance(generation, int) and (
        not isinstance(observed, int) or observed < generation
    )
    total = (status.get("gpuHours") or {}).get("total")
    hours = float(total) if isinstance(total, int | float) else 0.0
    return RunEntry(status.get("phase"), lagging, hours, _likelihood(status))


def _likelihood(status: Any) -> tuple[tuple[str, int, float], ...]:
    """The training monitor's per-source figures, for `dflash_training_off_distribution_rate`."""
    sources = ((status.get("training") or {}).get("likelihood") or {}).get("sources") or {}
    out = []
    for name, figures in sources.items() if isinstance(sources, dict) else ():
        rows, rate = (figures or {}).get("scoredRows"), (figures or {}).get("offDistributionRate")
        if isinstance(rows, int) and isinstance(rate, int | float):
            out.append((str(name), rows, float(rate)))
    return tuple(sorted(out))


@kopf.on.event("batch", "v1", "jobs", labels=OURS)
@kopf.on.event("kubeflow.org", "v1", "pytorchjobs", labels=OURS)
@kopf.on.event("trainer.kubeflow.org", "v1alpha1", "trainjobs", labels=OURS)
@kopf.on.event("jobset.x-k8s.io", "v1alpha2", "jobsets", labels=OURS)
@kopf.on.event("", "v1", "pods", labels=OURS)
async def child_changed(
    namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any
) -> None:
    """A child moved: reconcile its run (the queue folds bursts into one reconcile)."""
    run = labels.get(LABEL_RUN)
    if namespace and run and "controller" in memo:
        memo.controller.enqueue(namespace, run)
