"""Operator start and stop: kopf settings (our own annotation prefix, watch timeouts,
server-side selectors, no peering; scanning follows CRDs), the client, the reconcile workers, the
resync loop and `/metrics`.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from dflash_operator import metrics
from dflash_operator.api.constants import GROUP, Phase
from dflash_operator.children.meta import CHILD_SELECTOR
from dflash_operator.children.pod import PodSettings
from dflash_operator.config import ConfigError, OperatorConfig, load_config
from dflash_operator.handlers.children import RunEntry
from dflash_operator.plan.stages import PlanSettings
from dflash_operator.pools import PoolsConfig, PoolsError, load_pools
from dflash_operator.runtime.cleanup import CleanupRunner
from dflash_operator.runtime.controller import Controller, run_key
from dflash_operator.runtime.kube import Kube, load_api_client
from dflash_operator.runtime.observer import (
    CHILD_INDEXES,
    JOBSET_INDEX,
    POD_INDEX,
    Observer,
    snapshot,
)
from dflash_operator.runtime.reconciler import Reconciler

log = logging.getLogger(__name__)
# kopf's own bookkeeping goes to annotations `kopf.dflash.dev/...`: status stays ours.
KOPF_PREFIX = f"kopf.{GROUP}"
FINALIZER = f"{GROUP}/cleanup"
# kopf runs sync handlers (ours only enqueue) in this many threads.
KOPF_HANDLER_THREADS = 4
RUNS_INDEX = "dflash_runs"
# Extra connections beyond one per worker: events and the cleanup handler.
SPARE_CONNECTIONS = 4


def configure_kopf(settings: kopf.OperatorSettings, config: OperatorConfig) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    settings.posting.enabled = False  # events are ours (runtime/events.py), not log lines
    settings.peering.standalone = True  # one replica, strategy Recreate (the chart)
    # Scanning on: kopf follows CRDs, so the PyTorchJob / TrainJob watches start when the
    # training-operator or Trainer is installed after us (no restart); in single-namespace mode it follows the namespaces.
    settings.scanning.disabled = False
    settings.watching.server_timeout = int(config.watch_server_timeout)  # the API wants seconds
    settings.watching.client_timeout = config.watch_client_timeout
    settings.watching.connect_timeout = config.connect_timeout
    settings.networking.request_timeout = config.request_timeout
    settings.networking.connect_timeout = config.connect_timeout
    settings.execution.max_workers = KOPF_HANDLER_THREADS
    for resource in (
        ("batch", "jobs"),
        ("kubeflow.org", "pytorchjobs"),
        ("trainer.kubeflow.org", "trainjobs"),
        ("jobset.x-k8s.io", "jobsets"),
        ("", "pods"),
        ("", "configmaps"),
    ):
        settings.watching.label_selectors[resource] = CHILD_SELECTOR


def _load(memo: kopf.Memo) -> tuple[OperatorConfig, PoolsConfig]:
    try:
        config = memo.get("config") or load_config()
        pools = memo.get("pools") or load_pools(config.pools_file)
    except (ConfigError, PoolsError) as error:
        raise kopf.PermanentError(str(error)) from None
    return config, pools


def needs_resync(phase: str | None, lagging: bool) -> bool:
    """Unfinished runs, and finished ones whose status lags an edit (a missed update event
    must not leave observedGeneration behind for good: Argo CD would show it Progressing)."""
    return lagging or phase not in (Phase.SUCCEEDED.value, Phase.FAILED.value)


@kopf.on.startup()
def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    config, pools = _load(memo)
    configure_kopf(settings, config)
    kube = Kube(
        load_api_client(pool_size=config.workers + SPARE_CONNECTIONS),
        connect_timeout=config.connect_timeout,
        read_timeout=config.request_timeout,
    )
    plan_settings = PlanSettings(
        regen_image=config.regen_image,
        trainer_image=config.trainer_image,
        stage_backoff_limit=config.stage_backoff_limit,
        pod=PodSettings(image_pull_policy=config.image_pull_policy, run_as_user=config.run_as_user),
        default_launcher=config.default_launcher,
        training_runtime=config.training_runtime,
    )
    indices = {name: kwargs[name] for name in (*CHILD_INDEXES, POD_INDEX, JOBSET_INDEX, RUNS_INDEX)}
    runs = indices[RUNS_INDEX]

    def entries() -> dict[str, RunEntry]:
        found = snapshot(lambda: [(key, tuple(values)) for key, values in runs.items()])
        return {run_key(*key): next(iter(values), RunEntry(None, False)) for key, values in found}

    def phases() -> dict[str, str | None]:
        return {key: entry.phase for key, entry in entries().items()}

    def gpu_hours() -> dict[str, float]:
        return {key: entry.gpu_hours for key, entry in entries().items() if entry.gpu_hours}

    def likelihood() -> dict[str, tuple[tuple[str, int, float], ...]]:
        return {key: entry.likelihood for key, entry in entries().items() if entry.likelihood}

    def live_runs() -> list[str]:
        return [key for key, entry in entries().items() if needs_resync(entry.phase, entry.lagging)]

    reconciler = Reconciler(kube, Observer(indices, kube), pools, plan_settings)
    memo.controller = Controller(reconciler, config.workers, config.resync_seconds, live_runs)
    memo.cleanup = CleanupRunner(kube, pools, plan_settings, config.cleanup_timeout)
    memo.controller.start()
    metrics.register_run_phases(phases)
    metrics.register_run_gpu_hours(gpu_hours)
    metrics.register_training_likelihood(likelihood)
    metrics.serve(config.metrics_port, config.bind_address)
    log.info(
        "dflash-operator started: %s, pools %s, %d workers",
        "all namespaces" if config.clusterwide else "namespaces " + ",".join(config.namespaces),
        pools.names(),
        config.workers,
    )


@kopf.on.cleanup()
def stop(memo: kopf.Memo, **_: Any) -> None:
    controller = memo.get("controller")
    if controller is not None:
        controller.stop()
