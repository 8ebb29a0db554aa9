"""The executor process: registers its nodes, watches the pods bound to them (one watch per
node, as kubelet does, with periodic relists), hands each pod to its own PodWorker, and on
SIGTERM/SIGINT stops every child and marks its nodes NotReady (or deletes them).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import threading
import time
from typing import IO

from dflash_dev import procs
from dflash_dev.errors import DevError
from dflash_dev.images.engine import Engine, detect_engine

from .addresses import HostPorts, LoopbackPool, ServiceResolver
from .config import ExecutorConfig, ready_file
from .context import Context, finalize_pod
from .image_mode import remove_orphan_rootfs
from .kube import Kube, Obj, is_status
from .nodes import NodeKeeper, node_capacity
from .objects import ObjectSource
from .process import kill_orphans
from .worker import PodWorker

log = logging.getLogger(__name__)

# The server ends each watch after WATCH_SECONDS; every RESYNC_SECONDS we list again, which
# also catches a deletion whose event was lost while the watch was down.
WATCH_SECONDS = 30
RESYNC_SECONDS = 60.0
# A failing watch (apiserver restarting) is retried at 1 s doubling to 30 s, one warning each.
RETRY_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0
TICK_SECONDS = 1.0
SHUTDOWN_JOIN_SECONDS = 15.0  # pod workers stop their processes (5 s grace each) in parallel
TERMINAL = ("Succeeded", "Failed")


def _image_engine(cfg: ExecutorConfig) -> Engine | None:
    """Image mode's engine (Buildah or Podman: their storage has mountable root filesystems)."""
    if not cfg.from_images:
        return None
    engine = detect_engine()
    if not engine.stores_locally:
        raise DevError(
            f"--from-images needs Buildah or Podman; {engine.kind} keeps its images in a daemon"
        )
    return engine


class Executor:
    def __init__(self, cfg: ExecutorConfig) -> None:
        self.cfg = cfg
        self.stop = threading.Event()
        self.kube = Kube(cfg.kubeconfig)
        self.executor_id = f"{socket.gethostname()}:{cfg.state_dir}"
        self._workers: dict[str, PodWorker] = {}
        self._finalizing: set[str] = set()
        self._lock = threading.Lock()
        self._lock_file: IO[str] | None = None
        self.ctx = Context(
            kube=self.kube,
            cfg=cfg,
            objects=ObjectSource(self.kube),
            ips=LoopbackPool(cfg.pod_cidr),
            ports=HostPorts(),
            resolver=ServiceResolver(self.kube),
            node_names=frozenset(cfg.node_names),
            allocatable=node_capacity(cfg),
            engine=_image_engine(cfg),
        )

    # ------------------------------------------------------------------ lifecycle
    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (or until --exit-with-pid's process is gone)."""
        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        killed = kill_orphans(self.ctx.pods_dir)
        if killed:
            log.warning("killed %d process group(s) left by a previous executor", killed)
        if self.ctx.engine is not None:
            live = {p.name for p in self.ctx.pods_dir.glob("*/*/*") if p.is_dir()}
            removed = remove_orphan_rootfs(self.ctx.engine, self.cfg.instance, live)
            if removed:
                log.warning("removed %d pod root filesystem(s) of deleted pods", removed)
        keeper = NodeKeeper(self.kube, self.cfg, self.executor_id)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())
        try:
            keeper.register()
            threading.Thread(
                target=keeper.keep_alive, args=(self.stop,), name="nodes", daemon=True
            ).start()
            for node in self.cfg.node_names:
                threading.Thread(
                    target=self._watch_node, args=(node,), name=f"watch {node}", daemon=True
                ).start()
            ready_file(self.cfg.state_dir).write_text(
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "nodes": self.cfg.node_names,
                        "instance": self.cfg.instance,
                        "from_images": self.cfg.from_images,
                    }
                )
            )
            log.info(
                "serving nodes %s (state in %s)", ", ".join(self.cfg.node_names), self.cfg.state_dir
            )
            owner = self.cfg.exit_with_pid
            owner_ticks = procs.process_start_ticks(owner) if owner else None
            while not self.stop.wait(TICK_SECONDS):
                if owner and (
                    owner_ticks is None or procs.process_start_ticks(owner) != owner_ticks
                ):
                    log.info("process %d (--exit-with-pid) is gone: stopping", owner)
                    self.stop.set()
        finally:
            self._shutdown(keeper)

    def _take_lock(self) -> None:
        path = self.cfg.state_dir / "executor.lock"
        handle = path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise DevError(
                f"another executor already uses state dir {self.cfg.state_dir}; stop it "
                "(`make executor-down`) or pass another --state-dir"
            ) from None
        self._lock_file = handle

    def _shutdown(self, keeper: NodeKeeper) -> None:
        self.stop.set()
        ready_file(self.cfg.state_dir).unlink(missing_ok=True)
        with self._lock:
            workers = [w for w in self._workers.values() if not w.done.is_set()]
        for worker in workers:
            worker.shutdown()
        deadline = time.monotonic() + SHUTDOWN_JOIN_SECONDS
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        keeper.shutdown()
        if self.ctx.engine is not None:
            # No root filesystem outlives the executor: a pod that starts again after a restart
            # gets a fresh one (as a container is re-created after a node reboot).
            remove_orphan_rootfs(self.ctx.engine, self.cfg.instance, live_uids=set())
        log.info("stopped; %d pod(s) were still active", len(workers))

    # ------------------------------------------------------------------ pods
    def _watch_node(self, node: str) -> None:
        selector = f"spec.nodeName={node}"
        retry = RETRY_SECONDS
        while not self.stop.is_set():
            try:
                listing = self.kube.get("/api/v1/pods", fieldSelector=selector)
                retry = RETRY_SECONDS
                version = listing["metadata"]["resourceVersion"]
                self._sync(node, listing.get("items") or [])
                resync_at = time.monotonic() + RESYNC_SECONDS
                while not self.stop.is_set() and time.monotonic() < resync_at:
                    for event in self.kube.watch(
                        "/api/v1/pods", version, WATCH_SECONDS, fieldSelector=selector
                    ):
                        pod = event["object"]
                        version = pod["metadata"]["resourceVersion"]
                        if event["type"] == "DELETED":
                            self._gone(pod["metadata"]["uid"])
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self._dispatch(pod)
                        if self.stop.is_set() or time.monotonic() >= resync_at:
                            break
            except Exception as exc:
                if not is_status(exc, 410):  # 410: our version is too old; just list again
                    log.warning("watch of pods on %s failed (%s); again in %gs", node, exc, retry)
                    self.stop.wait(retry)
                    retry = min(retry * 2, RETRY_MAX_SECONDS)

    def _sync(self, node: str, pods: list[Obj]) -> None:
        seen = {p["metadata"]["uid"] for p in pods}
        for pod in pods:
            self._dispatch(pod)
        with self._lock:
            vanished = [
                uid for uid, w in self._workers.items() if uid not in seen and w.node_name == node
            ]
        for uid in vanished:
            self._gone(uid)

    def _dispatch(self, pod: Obj) -> None:
        """Route a pod's new version: to its worker, to a new worker, or to finalization."""
        if self.stop.is_set():
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            worker = self._workers.get(uid)
            if worker is not None and not worker.done.is_set():
                worker.observe(pod)
                return
            if meta.get("deletionTimestamp"):
                # No process left (finished, never started, or lost in a restart): just remove it.
                if uid not in self._finalizing:
                    self._finalizing.add(uid)
                    threading.Thread(target=finalize_pod, args=(self.ctx, pod), daemon=True).start()
                return
            if worker is not None or phase in TERMINAL:
                return  # done; kept until the object is gone so a stale event cannot rerun it
            worker = PodWorker(self.ctx, pod)
            self._workers[uid] = worker
        log.info(
            "pod %s/%s: assigned to %s", meta["namespace"], meta["name"], pod["spec"]["nodeName"]
        )
        worker.start()

    def _gone(self, uid: str) -> None:
        with self._lock:
            worker = self._workers.pop(uid, None)
            self._finalizing.discard(uid)
        if worker is not None:
            worker.observe_gone()
