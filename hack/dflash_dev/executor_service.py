"""Start and stop the process executor as a tracked background process (`make executor-up`,
`make executor-down`, `dflash-dev executor-status`); tests start theirs with `launch()`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import cluster, procs
from .errors import DevError
from .executor.config import ready_file
from .executor.logs import default_state_dir
from .paths import venv_bin

NAME = "executor"
START_SECONDS = 60.0
POLL_SECONDS = 0.1


def launch(kubeconfig: Path, state_dir: Path, *extra: str) -> procs.Tracked:
    """Start `python -m dflash_dev.executor run` detached; return once it serves its nodes.

    Raises DevError with the executor's last log lines if it exits or hangs at start.
    """
    python = venv_bin() / "python"
    argv = [
        str(python),
        "-m",
        "dflash_dev.executor",
        "run",
        f"--kubeconfig={kubeconfig}",
        f"--state-dir={state_dir}",
        f"--python={python}",
        *extra,
    ]
    state_dir.mkdir(parents=True, exist_ok=True)
    ready_file(state_dir).unlink(missing_ok=True)
    tracked = procs.start(state_dir, NAME, argv)
    deadline = time.monotonic() + START_SECONDS
    while _serving_pid(state_dir) != tracked.pid:
        if not tracked.is_alive():
            raise DevError(
                f"the executor exited at start ({tracked.log}):\n{procs.tail(tracked.log)}"
            )
        if time.monotonic() > deadline:
            procs.stop(state_dir, NAME)
            raise DevError(
                f"the executor did not start in {START_SECONDS:.0f}s:\n{procs.tail(tracked.log)}"
            )
        time.sleep(POLL_SECONDS)
    return tracked


def _serving_pid(state_dir: Path) -> int | None:
    try:
        return int(json.loads(ready_file(state_dir).read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None


def executor_status(state_dir: Path | None = None) -> dict[str, Any] | None:
    """What the running executor serves ({pid, nodes, instance, log}), or None."""
    state_dir = state_dir or default_state_dir()
    tracked = procs.read_tracked(state_dir, NAME)
    if tracked is None or not tracked.is_alive():
        return None
    try:
        info: dict[str, Any] = json.loads(ready_file(state_dir).read_text())
    except (OSError, ValueError):
        return None
    return {**info, "log": str(tracked.log), "state_dir": str(state_dir)}


def executor_up(
    nodes: int = 2, extra: tuple[str, ...] = (), from_images: bool = False
) -> dict[str, Any]:
    """Start the executor for the local cluster (idempotent: a running one is returned, unless
    it runs pods the other way: from images or as local processes)."""
    running = executor_status()
    if running is not None and bool(running.get("from_images")) == from_images:
        return running
    if running is not None:
        executor_down()
    if from_images:
        extra = (*extra, "--from-images")
    if not cluster.is_healthy():
        raise DevError("the local cluster is not running: start it with `make cluster-up`")
    launch(cluster.kubeconfig_path(), default_state_dir(), f"--nodes={nodes}", *extra)
    status = executor_status()
    if status is None:
        raise DevError(f"the executor stopped right after starting; see {default_state_dir()}")
    return status


def executor_down() -> bool:
    """Stop it (its pods' processes get SIGTERM; nodes go NotReady). True if it ran."""
    return procs.stop(default_state_dir(), NAME, grace=procs.STOP_GRACE_SECONDS * 2)


# ---------------------------------------------------------------- `dflash-dev executor-*`
def _up(args: argparse.Namespace) -> None:
    status = executor_up(args.nodes, tuple(args.extra))
    print(f"executor up (pid {status['pid']}): nodes {', '.join(status['nodes'])}")
    print("  pods run there when they tolerate dflash.dev/executor=local:NoSchedule and select")
    print("  dflash.dev/node-pool=local; read a pod's log: make executor-logs POD=<ns>/<pod>")


def _down(_: argparse.Namespace) -> None:
    print("executor stopped" if executor_down() else "executor was not running")


def _status(_: argparse.Namespace) -> None:
    status = executor_status()
    if status is None:
        print("executor: down")
        sys.exit(1)
    print(f"executor: up (pid {status['pid']}), nodes {', '.join(status['nodes'])}")
    print(f"  state {status['state_dir']}, its own log {status['log']}")


def _logs(args: argparse.Namespace) -> None:
    if args.pod is None:
        tracked = procs.read_tracked(default_state_dir(), NAME)
        if tracked is None:
            raise DevError("the executor has not run here: start it with `make executor-up`")
        print(procs.tail(tracked.log, args.lines))
        return
    namespace, _, name = args.pod.partition("/")
    if not namespace or not name:
        raise DevError(f"POD {args.pod!r}: expected <namespace>/<pod>")
    from .executor.__main__ import main as executor_cli

    argv = [f"{namespace}/{name}", *(["--follow"] if args.follow else [])]
    executor_cli(["logs", *argv, f"--state-dir={default_state_dir()}"])


def add_commands(sub: Any) -> None:
    """Register executor-up/down/status/logs on the `dflash-dev` argument parser."""
    up = sub.add_parser("executor-up", help="start the process executor (idempotent)")
    up.add_argument("--nodes", type=int, default=2, help="executor nodes local-0..N-1")
    up.add_argument("extra", nargs="*", help="more `python -m dflash_dev.executor` flags after --")
    up.set_defaults(fn=_up)
    sub.add_parser(
        "executor-down", help="stop it: pods' processes stop, nodes go NotReady"
    ).set_defaults(fn=_down)
    sub.add_parser("executor-status", help="exit 0 when it runs; print its nodes").set_defaults(
        fn=_status
    )
    logs = sub.add_parser(
        "executor-logs", help="a pod's log (<namespace>/<pod>), or the executor's own"
    )
    logs.add_argument("pod", nargs="?", metavar="NAMESPACE/POD")
    logs.add_argument("-f", "--follow", action="store_true")
    logs.add_argument("-n", "--lines", type=int, default=50, help="lines of the executor's own log")
    logs.set_defaults(fn=_logs)
