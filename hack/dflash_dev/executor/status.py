"""Pure builders of the pod status a kubelet would report: container states, conditions, phase.

The worker sends them as strategic-merge patches of `pods/status`; the states of a container
carry explicit nulls so that a patch moving `waiting` -> `running` -> `terminated` replaces the
previous state instead of merging into it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from .config import HOST_IP

Obj = dict[str, Any]
RUNTIME = "dflash-executor"
SKIPPED_INIT_MESSAGE = "skipped: the process executor does not run init containers"
NOT_RUN_MESSAGE = "not run: the process executor runs only the pod's first container"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def waiting(reason: str, message: str = "") -> Obj:
    return {"waiting": {"reason": reason, "message": message or None}}


def running(started_at: str) -> Obj:
    return {"running": {"startedAt": started_at}}


def terminated(
    exit_code: int, reason: str, message: str, started_at: str, finished_at: str, container_id: str
) -> Obj:
    return {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "message": message or None,
            "startedAt": started_at,
            "finishedAt": finished_at,
            "containerID": container_id or None,
        }
    }


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


def container_id(uid: str, restart_count: int) -> str:
    return f"{RUNTIME}://{uid}-{restart_count}"


def container_status(
    container: Obj,
    state: Obj,
    *,
    restart_count: int = 0,
    last_state: Obj | None = None,
    cid: str = "",
) -> Obj:
    is_running = "running" in state
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "containerID": cid or None,
        "ready": is_running,
        "started": is_running,
        "restartCount": restart_count,
        "state": {"waiting": None, "running": None, "terminated": None, **state},
        "lastState": last_state or {},
    }


def _finished(container: Obj, message: str, reason: str) -> Obj:
    stamp = now()
    return container_status(container, terminated(0, reason, message, stamp, stamp, ""))


def _condition(kind: str, ok: bool, previous: Obj, reason: str = "", message: str = "") -> Obj:
    status = "True" if ok else "False"
    before: Obj = next((c for c in previous.get("conditions") or [] if c.get("type") == kind), {})
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": since or now(),
        "reason": reason or None,
        "message": message or None,
    }


def build_pod_status(
    pod: Obj,
    main: Obj,
    *,
    phase: str,
    pod_ip: str | None,
    start_time: str,
    reason: str = "",
    message: str = "",
) -> Obj:
    """The whole `status` for a patch: `main` is the first container's status (see above)."""
    spec = pod["spec"]
    previous = pod.get("status") or {}
    ready = main["ready"]
    terminal = phase in ("Succeeded", "Failed")
    not_ready_reason = "PodCompleted" if terminal else "ContainersNotReady"
    not_ready_message = "" if terminal else f"containers with unready status: [{main['name']}]"
    others = [_finished(c, NOT_RUN_MESSAGE, "NotRunByExecutor") for c in spec["containers"][1:]]
    status: Obj = {
        "phase": phase,
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "startTime": start_time,
        "reason": reason or None,
        "message": message or None,
        "conditions": [
            _condition("PodReadyToStartContainers", pod_ip is not None and not terminal, previous),
            _condition("Initialized", True, previous),
            _condition(
                "ContainersReady",
                ready,
                previous,
                *(("", "") if ready else (not_ready_reason, not_ready_message)),
            ),
            _condition(
                "Ready",
                ready,
                previous,
                *(("", "") if ready else (not_ready_reason, not_ready_message)),
            ),
            _condition("PodScheduled", True, previous),
        ],
        "containerStatuses": [main, *others],
    }
    if pod_ip:  # never cleared: a pod keeps its IP until it is deleted
        status.update(podIP=pod_ip, podIPs=[{"ip": pod_ip}])
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [
            _finished(c, SKIPPED_INIT_MESSAGE, "Completed") for c in spec["initContainers"]
        ]
    return status


def terminal_phase(exit_code: int) -> str:
    return "Succeeded" if exit_code == 0 else "Failed"


def should_restart(policy: str, exit_code: int) -> bool:
    """kubelet's rule for the pod's restartPolicy (Always, OnFailure, Never)."""
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return exit_code != 0
    return False
