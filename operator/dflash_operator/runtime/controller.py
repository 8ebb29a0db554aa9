"""The reconcile loop: worker threads take run keys from the work queue and reconcile them;
a resync thread re-queues every live run now and then (a safety net under the watches).
kopf handlers only ever call `enqueue`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from dflash_operator import metrics
from dflash_operator.runtime.kube import KubeError
from dflash_operator.runtime.reconciler import Reconciler
from dflash_operator.runtime.workqueue import WorkQueue

log = logging.getLogger(__name__)
# How long a worker waits on an empty queue before checking for shutdown.
IDLE_POLL_SECONDS = 1.0


def run_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


class Controller:
    """Owns the queue, the workers and the resync timer."""

    def __init__(
        self,
        reconciler: Reconciler,
        workers: int,
        resync_seconds: float,
        live_runs: Callable[[], Iterable[str]],
    ) -> None:
        self.reconciler = reconciler
        self.queue = WorkQueue()
        self.workers = workers
        self.resync_seconds = resync_seconds
        self.live_runs = live_runs
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def enqueue(self, namespace: str, name: str) -> None:
        self.queue.add(run_key(namespace, name))
        metrics.QUEUE_DEPTH.set(len(self.queue))

    def start(self) -> None:
        for index in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"reconcile-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        resync = threading.Thread(target=self._resync, name="resync", daemon=True)
        resync.start()
        self._threads.append(resync)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.queue.shutdown()
        for thread in self._threads:
            thread.join(timeout)

    def _resync(self) -> None:
        while not self._stop.wait(self.resync_seconds):
            for key in list(self.live_runs()):
                self.queue.add(key)
            metrics.QUEUE_DEPTH.set(len(self.queue))

    def _work(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get(timeout=IDLE_POLL_SECONDS)
            if key is None:
                continue
            try:
                self._process(key)
            finally:
                self.queue.done(key)
                metrics.QUEUE_DEPTH.set(len(self.queue))

    def _process(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        try:
            result = self.reconciler.reconcile(namespace, name)
        except KubeError as error:
            delay = self.queue.add_rate_limited(key)
            metrics.RECONCILES.labels("error").inc()
            metrics.RECONCILE_ERRORS.labels("api").inc()
            log.warning("reconcile of %s failed (%s); retrying in %.1fs", key, error, delay)
            return
        except Exception:  # a bug must not kill the worker thread; it is retried with backoff
            delay = self.queue.add_rate_limited(key)
            metrics.RECONCILES.labels("error").inc()
            metrics.RECONCILE_ERRORS.labels("unexpected").inc()
            log.exception("reconcile of %s failed unexpectedly; retrying in %.1fs", key, delay)
            return
        metrics.RECONCILES.labels("ok").inc()
        if result.retry:
            # The reconcile's own delay (e.g. 10 s after a refused creation), growing with
            # repeated failures: never the bare rate limiter's 0.5 s.
            self.queue.add_rate_limited(key, at_least=result.requeue_after or 0.0)
            return
        self.queue.forget(key)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)
