"""Background processes tracked by pid files: start detached, check, stop cleanly.

A pid file records the pid and the process start time, so a stale file whose pid was
reused by another program is never mistaken for ours (and never killed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STOP_GRACE_SECONDS = 10.0


def process_start_ticks(pid: int) -> int | None:
    """Kernel start time of `pid` (field 22 of /proc/<pid>/stat), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; it ends at the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    state = fields[0]
    if state == "Z":  # a zombie has exited already
        return None
    return int(fields[19])


@dataclass(frozen=True)
class Tracked:
    name: str
    pid: int
    start_ticks: int
    log: Path

    def is_alive(self) -> bool:
        return process_start_ticks(self.pid) == self.start_ticks


def pid_file(state_dir: Path, name: str) -> Path:
    return state_dir / "pids" / f"{name}.json"


def read_tracked(state_dir: Path, name: str) -> Tracked | None:
    path = pid_file(state_dir, name)
    try:
        data = json.loads(path.read_text())
        return Tracked(name, int(data["pid"]), int(data["start_ticks"]), Path(data["log"]))
    except (OSError, ValueError, KeyError):
        return None


def start(
    state_dir: Path,
    name: str,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Tracked:
    """Start `argv` in its own session (so Ctrl-C on the caller does not kill it), logging to a file."""
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    ticks = process_start_ticks(proc.pid)
    tracked = Tracked(name, proc.pid, ticks or 0, log)
    path = pid_file(state_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"pid": proc.pid, "start_ticks": tracked.start_ticks, "log": str(log)})
    )
    return tracked


def stop(state_dir: Path, name: str, grace: float = STOP_GRACE_SECONDS) -> bool:
    """SIGTERM the tracked process group, SIGKILL after `grace` seconds. True if it was running."""
    tracked = read_tracked(state_dir, name)
    pid_file(state_dir, name).unlink(missing_ok=True)
    if tracked is None or not tracked.is_alive():
        return False
    _signal_group(tracked.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not tracked.is_alive():
            return True
        time.sleep(0.1)
    _signal_group(tracked.pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and tracked.is_alive():
        time.sleep(0.1)
    return True


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
