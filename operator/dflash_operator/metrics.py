"""Prometheus metrics of the operator (served on `/metrics`): runs per phase, reconcile
duration and errors, gate failures, API requests, work-queue depth; plus process metrics
(resident memory, CPU) from the client library's default collectors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dflash_operator.api.constants import Phase

RECONCILE_SECONDS = Histogram(
    "dflash_reconcile_duration_seconds",
    "Time to reconcile one DFlashRun (read, plan, act, write status).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
RECONCILES = Counter("dflash_reconciles_total", "Reconciles of DFlashRuns, by outcome.", ["result"])
RECONCILE_ERRORS = Counter(
    "dflash_reconcile_errors_total",
    "Reconciles that failed, by cause (api, unexpected, unreadable_status).",
    ["cause"],
)
GATE_FAILURES = Counter(
    "dflash_gate_failures_total", "Data-audit gates that failed, by gate.", ["gate"]
)
CHILDREN_CREATED = Counter(
    "dflash_children_created_total", "Children created by the operator, by kind.", ["kind"]
)
API_REQUESTS = Counter(
    "dflash_api_requests_total",
    "Kubernetes API requests sent by the reconciler, by HTTP verb, kind and status code.",
    ["verb", "kind", "code"],
)
QUEUE_DEPTH = Gauge("dflash_workqueue_depth", "Runs waiting to be reconciled.")


class RunPhaseCollector(Collector):
    """`dflash_runs{phase}`: counted at scrape time from the operator's index of runs."""

    def __init__(self, phases: Callable[[], Mapping[str, str | None]]) -> None:
        self._phases = phases

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = {phase.value: 0 for phase in Phase}
        for phase in self._phases().values():
            key = phase or Phase.PENDING.value
            counts[key] = counts.get(key, 0) + 1
        family = GaugeMetricFamily("dflash_runs", "DFlashRuns by phase.", labels=["phase"])
        for phase, count in counts.items():
            family.add_metric([phase], count)
        yield family


_phase_collector: RunPhaseCollector | None = None


def register_run_phases(phases: Callable[[], Mapping[str, str | None]]) -> None:
    """Count runs per phase from `phases()` (run key -> phase) at every scrape."""
    global _phase_collector  # one collector per process
    if _phase_collector is not None:
        REGISTRY.unregister(_phase_collector)
    _phase_collector = RunPhaseCollector(phases)
    REGISTRY.register(_phase_collector)


class RunGpuHoursCollector(Collector):
    """`dflash_run_gpu_hours{namespace,run}`: status.gpuHours.total of each run, at scrape."""

    def __init__(self, hours: Callable[[], Mapping[str, float]]) -> None:
        self._hours = hours

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "dflash_run_gpu_hours",
            "GPU-hours the run's pods held (status.gpuHours.total).",
            labels=["namespace", "run"],
        )
        for key, value in sorted(self._hours().items()):
            namespace, _, name = key.partition("/")
            family.add_metric([namespace, name], value)
        yield family


_gpu_collector: RunGpuHoursCollector | None = None


def register_run_gpu_hours(hours: Callable[[], Mapping[str, float]]) -> None:
    """Export each run's GPU-hours from `hours()` (run key -> hours) at every scrape."""
    global _gpu_collector  # one collector per process
    if _gpu_collector is not None:
        REGISTRY.unregister(_gpu_collector)
    _gpu_collector = RunGpuHoursCollector(hours)
    REGISTRY.register(_gpu_collector)


# (source, scored rows, off-distribution rate) of each run's training monitor.
SourceFigures = tuple[tuple[str, int, float], ...]


class TrainingLikelihoodCollector(Collector):
    """`dflash_training_off_distribution_rate{namespace,run,source}` and
    `dflash_training_scored_rows{...}`: the training likelihood monitor's figures
    (status.training.likelihood.sources), at scrape."""

    def __init__(self, figures: Callable[[], Mapping[str, SourceFigures]]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["namespace", "run", "source"]
        rate = GaugeMetricFamily(
            "dflash_training_off_distribution_rate",
            "Share of the rows scored during training that the target would not have "
            "generated, per source (spec.audit.likelihood.maxOffDistributionRate bounds it).",
            labels=labels,
        )
        rows = GaugeMetricFamily(
            "dflash_training_scored_rows",
            "Rows the training likelihood monitor scored so far, per source.",
            labels=labels,
        )
        for key, sources in sorted(self._figures().items()):
            namespace, _, name = key.partition("/")
            for source, scored, off_rate in sources:
                rate.add_metric([namespace, name, source], off_rate)
                rows.add_metric([namespace, name, source], scored)
        yield rate
        yield rows


_likelihood_collector: TrainingLikelihoodCollector | None = None


def register_training_likelihood(figures: Callable[[], Mapping[str, SourceFigures]]) -> None:
    """Export each run's training-monitor figures from `figures()` (run key -> per source)."""
    global _likelihood_collector  # one collector per process
    if _likelihood_collector is not None:
        REGISTRY.unregister(_likelihood_collector)
    _likelihood_collector = TrainingLikelihoodCollector(figures)
    REGISTRY.register(_likelihood_collector)


def serve(port: int, address: str) -> None:
    """Serve /metrics in a background thread (0 disables it)."""
    if port:
        start_http_server(port, addr=address)
