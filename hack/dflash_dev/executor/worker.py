"""One pod's life on an executor node, owned by one thread: prepare (env, volumes, addresses),
run the first container's command, report status, restart per restartPolicy, honour deletion.

Only this thread patches its pod's status or touches its process; the executor feeds it the
pod's latest version (`observe`) and tells it when the pod is gone or the executor stops.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from . import logs, process
from .context import Context, finalize_pod
from .errors import (
    FAILED_MOUNT,
    START_ERROR_EXIT_CODE,
    PodConfigError,
    PodStartError,
    VolumeMountError,
    WaitInterruptedError,
    mount_failure_message,
)
from .events import RepeatedEvents, post_event
from .image_mode import image_argv, image_launcher_env, release_rootfs
from .kube import Obj, is_status, pod_path
from .prepare import Prepared, prepare_start
from .sandbox import DEFAULT_TERMINATION_PATH, Sandbox
from .status import (
    build_pod_status,
    container_id,
    container_status,
    exit_reason,
    now,
    running,
    should_restart,
    terminal_phase,
    terminated,
    waiting,
)

log = logging.getLogger(__name__)

HOST_TERMINATION_LOG = Path(DEFAULT_TERMINATION_PATH)

POLL_SECONDS = 0.1
TOKEN_CHECK_SECONDS = 10.0
# A pod waiting for a missing Secret/ConfigMap is retried like kubelet's pod sync: 1 s
# doubling to 30 s, so a late object is picked up soon without hammering the apiserver.
CONFIG_RETRY_INITIAL_SECONDS = 1.0
CONFIG_RETRY_MAX_SECONDS = 30.0
DEFAULT_GRACE_SECONDS = 30
# On executor shutdown children get at most this long before SIGKILL (the node is going away).
SHUTDOWN_GRACE_SECONDS = 5.0
# kubelet forgets a container's back-off once it ran this long (2 x the 5 min cap).
BACKOFF_RESET_SECONDS = 600.0
STATUS_PATCH_ATTEMPTS = 3
RESTARTED_EXIT_CODE = 137  # as if SIGKILLed: the executor (the "node") went away
RESTARTED_REASON = "ExecutorRestarted"
RESTARTED_MESSAGE = "the process executor restarted while this container ran; its process was lost"


@dataclass
class Exit:
    code: int
    state: Obj  # a `terminated` container state
    seconds: float


class PodWorker:
    """Runs one pod (by uid) from its first sight to its terminal status or deletion."""

    def __init__(self, ctx: Context, pod: Obj) -> None:
        self.ctx = ctx
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.key = f"{self.namespace}/{self.name}"
        self.container: Obj = spec["containers"][0]
        self.policy: str = spec.get("restartPolicy") or "Always"
        self.node_name: str = spec.get("nodeName", "")
        self.log_file = logs.log_path(
            ctx.cfg.state_dir, self.namespace, self.name, self.container["name"]
        )
        previous: Obj = next(iter(status.get("containerStatuses") or []), {})
        self.restart_count = int(previous.get("restartCount") or 0)
        self.last_state: Obj | None = previous.get("lastState") or None
        self.start_time: str = status.get("startTime") or now()
        self.ip: str | None = None
        self._previous_ip: str | None = status.get("podIP")
        self._pod = pod
        self._cond = threading.Condition()
        self._deleting = bool(meta.get("deletionTimestamp"))
        self._gone = False
        self._stopping = False
        self._last_waiting = ""
        self._mount_events = RepeatedEvents(ctx.kube, "Warning", FAILED_MOUNT)
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"pod {self.key}", daemon=True)

    # ------------------------------------------------------------------ the executor's side
    def start(self) -> None:
        self._thread.start()

    def observe(self, pod: Obj) -> None:
        with self._cond:
            self._pod = pod
            if pod["metadata"].get("deletionTimestamp"):
                self._deleting = True
            self._cond.notify_all()

    def observe_gone(self) -> None:
        with self._cond:
            self._gone = self._deleting = True
            self._cond.notify_all()

    def shutdown(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # ------------------------------------------------------------------ the pod's life
    def _interrupted(self, seconds: float) -> bool:
        """Wait up to `seconds`; True as soon as the pod is deleted or the executor stops."""
        with self._cond:
            return self._cond.wait_for(lambda: self._deleting or self._stopping, timeout=seconds)

    def _main(self) -> None:
        try:
            self._life()
        except WaitInterruptedError:
            pass
        except Exception as exc:  # never let one pod take the executor down
            log.exception("pod %s: unexpected executor error", self.key)
            self._fail_safely(exc)
        finally:
            if self.ip is not None:
                self.ctx.ips.release(self.ip)
            self.ctx.ports.release(self.uid)
            if self._deleting and not self._stopping:
                finalize_pod(self.ctx, self._pod)
            self.done.set()

    def _life(self) -> None:
        if self._deleting:
            return
        was_running = (self._pod.get("status") or {}).get("phase") == "Running"
        if was_running:
            if self._lost_process_ends_pod():
                return
        else:
            self._report(waiting("ContainerCreating"), phase="Pending")
        prepared = self._prepare(None)
        crashes = 0  # consecutive restarts in this back-off window
        while True:
            ended = self._run_once(prepared)
            if ended is None:
                return
            if not should_restart(self.policy, ended.code):
                self._report(ended.state, phase=terminal_phase(ended.code))
                if self.ctx.engine is not None:  # its container will not run again
                    release_rootfs(self.ctx.engine, self.ctx.cfg.instance, self.uid)
                log.info("pod %s: %s (exit %d)", self.key, terminal_phase(ended.code), ended.code)
                return
            self.last_state = ended.state
            crashes = 0 if ended.seconds >= BACKOFF_RESET_SECONDS else crashes
            delay = self._backoff(crashes)
            crashes += 1
            if delay:
                message = (
                    f"back-off {delay:g}s restarting failed container={self.container['name']} "
                    f"pod={self.name}_{self.namespace}({self.uid})"
                )
                self._report(waiting("CrashLoopBackOff", message), phase="Running")
                post_event(self.ctx.kube, self._pod, "Warning", "BackOff", message)
                if self._interrupted(delay):
                    return
            self.restart_count += 1
            # kubelet builds each container start afresh: env, Secrets and addresses again
            # (a re-created master has a new IP); the sandbox and its emptyDirs persist.
            prepared = self._prepare(prepared.sandbox)

    def _backoff(self, crashes: int) -> float:
        """kubelet's crash-loop delay: the first restart at once, then initial, doubling to max."""
        if crashes == 0:
            return 0.0
        cfg = self.ctx.cfg
        return float(min(cfg.backoff_initial * 2 ** (crashes - 1), cfg.backoff_max))

    def _lost_process_ends_pod(self) -> bool:
        """A Running pod we have no process for: the executor restarted, as after a node
        reboot. The restart policy decides: restart in place, or end the pod Failed."""
        stamp = now()
        lost = terminated(
            RESTARTED_EXIT_CODE, RESTARTED_REASON, RESTARTED_MESSAGE, self.start_time, stamp, ""
        )
        log.warning("pod %s: %s", self.key, RESTARTED_MESSAGE)
        if should_restart(self.policy, RESTARTED_EXIT_CODE):
            self.last_state = lost
            self.restart_count += 1
            return False
        self._report(lost, phase="Failed", reason=RESTARTED_REASON, message=RESTARTED_MESSAGE)
        return True

    def _prepare(self, sandbox: Sandbox | None) -> Prepared:
        """Resolve what a start needs; wait (reporting why) while something is missing."""
        delay = CONFIG_RETRY_INITIAL_SECONDS
        while True:
            try:
                if self.ip is None:
                    self.ip = self.ctx.ips.acquire(self._previous_ip)
                prepared = prepare_start(self.ctx, self._pod, self.ip, sandbox, self._interrupted)
                self._last_waiting = ""
                return prepared
            except PodConfigError as exc:
                self._report_waiting(exc, sandbox)
            if self._interrupted(delay):
                raise WaitInterruptedError
            delay = min(delay * 2, CONFIG_RETRY_MAX_SECONDS)

    def _report_waiting(self, exc: PodConfigError, sandbox: Sandbox | None) -> None:
        """Why the container cannot start, as kubelet says it: volumes that cannot be set up
        are FailedMount events (again at every retry) and a container in ContainerCreating
        with no message; a missing env reference is CreateContainerConfigError, with its
        message, and one Failed event."""
        message = str(exc)
        changed = message != self._last_waiting
        if changed:
            log.warning("pod %s: cannot start: %s", self.key, message)
            self._last_waiting = message
        if isinstance(exc, VolumeMountError):
            if changed:  # no sandbox yet, so no pod IP: PodReadyToStartContainers is False
                self._report(waiting(exc.reason), phase="Pending", with_ip=False)
            for volume, cause in exc.failures:
                self._mount_events.post(self._pod, mount_failure_message(volume, cause))
            return
        if changed:
            phase = "Pending" if sandbox is None else "Running"
            self._report(waiting(exc.reason, message), phase=phase)
            post_event(self.ctx.kube, self._pod, "Warning", "Failed", f"Error: {message}")

    def _run_once(self, prepared: Prepared) -> Exit | None:
        """Start the process and wait for its end: an Exit, or None when deleted/stopping."""
        sandbox = prepared.sandbox
        sandbox.termination_log.unlink(missing_ok=True)
        sandbox.termination_log.touch()
        started_at, clock = now(), time.monotonic()
        cid = container_id(self.uid, self.restart_count)
        try:
            if prepared.image is not None:
                argv = image_argv(prepared.image, self.container, prepared.env, sandbox)
            else:
                python = self.ctx.cfg.python
                argv = process.build_argv(self.container, prepared.env, python, sandbox.rewrite)
        except PodStartError as exc:
            logs.note(self.log_file, f"cannot start: {exc}")
            post_event(self.ctx.kube, self._pod, "Warning", "Failed", f"Error: {exc}")
            state = terminated(START_ERROR_EXIT_CODE, exc.reason, str(exc), started_at, now(), cid)
            return Exit(START_ERROR_EXIT_CODE, state, 0.0)
        host_log_before = _mtime(HOST_TERMINATION_LOG)
        if prepared.image is not None:
            start = prepared.image
            root = "read-only root" if start.readonly_root else "writable root"
            logs.note(
                self.log_file,
                f"from image {start.image} as {start.uid}:{start.gid}, {root}, cwd {start.cwd}",
            )
        offset = logs.begin(self.log_file, self.uid, self.restart_count, argv)
        # Image mode: the launcher gets only the container marker; the container's env is
        # set by the launcher at exec (none of it may steer the launcher's own Python).
        spawn_env = prepared.env if prepared.image is None else image_launcher_env(prepared.env)
        proc = process.spawn(argv, spawn_env, prepared.cwd, self.log_file)
        try:
            process.write_process_file(sandbox.root, proc.pid)
            log.info(
                "pod %s: pid %d on %s (restart %d)", self.key, proc.pid, self.ip, self.restart_count
            )
            self._report(running(started_at), phase="Running", cid=cid)
            started = f"Started container {self.container['name']}"
            post_event(self.ctx.kube, self._pod, "Normal", "Started", started)
            interrupted = self._wait_for_exit(proc, sandbox)
        except BaseException:
            process.stop(proc, 0, str(sandbox.root))  # never leave a process nobody watches
            raise
        if interrupted:
            self._kill(proc, started_at, cid, str(sandbox.root))
            return None
        code = process.exit_code(proc.returncode)
        # What the command left behind dies with it, as in a container whose init exited.
        process.signal_group(proc.pid, signal.SIGKILL, str(sandbox.root))
        message = self._message(sandbox, code, offset)  # before our note joins the log
        if not message and _mtime(HOST_TERMINATION_LOG) != host_log_before:
            warning = (
                f"{HOST_TERMINATION_LOG} of this machine changed while the container ran: if it "
                "wrote its result there, pass that path in its args or env (they are rewritten "
                "to the pod's own file; paths inside programs and files are not)"
            )
            logs.note(self.log_file, warning)
            log.warning("pod %s: %s", self.key, warning)
        logs.note(self.log_file, f"exited with code {code}")
        state = terminated(code, exit_reason(code), message, started_at, now(), cid)
        return Exit(code, state, time.monotonic() - clock)

    def _wait_for_exit(self, proc: subprocess.Popen[bytes], sandbox: Sandbox) -> bool:
        """Wait for the process to end; True if we were interrupted first."""
        next_token_check = time.monotonic() + TOKEN_CHECK_SECONDS
        while proc.poll() is None:
            if self._interrupted(POLL_SECONDS):
                return True
            if time.monotonic() >= next_token_check:
                next_token_check = time.monotonic() + TOKEN_CHECK_SECONDS
                try:
                    sandbox.refresh_tokens(self.ctx.objects, self._pod)
                except Exception as exc:
                    log.warning("pod %s: token refresh failed: %s", self.key, exc)
        return False

    def _kill(
        self, proc: subprocess.Popen[bytes], started_at: str, cid: str, sandbox_root: str
    ) -> None:
        """Deletion: SIGTERM, SIGKILL after the grace period, final status. Shutdown: shorter."""
        grace = self._grace_seconds()
        if self._stopping and not self._deleting:
            grace = min(grace, SHUTDOWN_GRACE_SECONDS)
        else:
            post_event(
                self.ctx.kube,
                self._pod,
                "Normal",
                "Killing",
                f"Stopping container {self.container['name']}",
            )
        logs.note(self.log_file, f"stopping: SIGTERM, SIGKILL after {grace:g}s")
        code = process.stop(proc, grace, sandbox_root)
        logs.note(self.log_file, f"stopped with code {code}")
        log.info("pod %s: stopped (exit %d)", self.key, code)
        if self._deleting and not self._gone and not self._stopping:
            state = terminated(code, exit_reason(code), "", started_at, now(), cid)
            self._report_quietly(state, phase=terminal_phase(code))

    def _grace_seconds(self) -> float:
        meta, spec = self._pod["metadata"], self._pod["spec"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
        return float(grace)

    def _message(self, sandbox: Sandbox, code: int, offset: int) -> str:
        message = logs.termination_message(sandbox.termination_log)
        fallback = self.container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        if not message and fallback and code != 0:
            message = logs.fallback_message(self.log_file, offset)
        return message

    # ------------------------------------------------------------------ status
    def _report(
        self,
        state: Obj,
        *,
        phase: str,
        reason: str = "",
        message: str = "",
        cid: str = "",
        with_ip: bool = True,
    ) -> None:
        main = container_status(
            self.container,
            state,
            restart_count=self.restart_count,
            last_state=self.last_state,
            cid=cid or (state.get("terminated") or {}).get("containerID") or "",
        )
        with self._cond:
            pod = self._pod
        body = {
            "metadata": {"uid": self.uid},  # never patch a newer pod of the same name
            "status": build_pod_status(
                pod,
                main,
                phase=phase,
                pod_ip=self.ip if with_ip else None,
                start_time=self.start_time,
                reason=reason,
                message=message,
            ),
        }
        for attempt in range(STATUS_PATCH_ATTEMPTS):
            try:
                updated = self.ctx.kube.patch(pod_path(self.namespace, self.name, "status"), body)
                self.observe(updated)
                return
            except Exception as exc:
                if is_status(exc, 404, 409):
                    self.observe_gone()
                    raise WaitInterruptedError from exc
                if attempt == STATUS_PATCH_ATTEMPTS - 1:
                    raise
                log.warning("pod %s: status patch failed (%s); retrying", self.key, exc)
                if self._interrupted(1.0 + attempt):
                    raise WaitInterruptedError from exc

    def _report_quietly(self, state: Obj, *, phase: str) -> None:
        try:
            self._report(state, phase=phase)
        except Exception as exc:
            log.debug("pod %s: final status not reported: %s", self.key, exc)

    def _fail_safely(self, exc: BaseException) -> None:
        stamp = now()
        message = f"the process executor failed to run this pod: {exc}"
        state = terminated(
            START_ERROR_EXIT_CODE, "ExecutorError", message, self.start_time, stamp, ""
        )
        self._report_quietly(state, phase="Failed")


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
