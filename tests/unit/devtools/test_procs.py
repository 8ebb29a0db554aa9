"""Tracked background processes start detached and stop cleanly, and a stale pid is never killed."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from dflash_dev import procs

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "open('ready', 'w').close(); time.sleep(60)",
]


def test_started_process_is_tracked_and_stopped(tmp_path: Path) -> None:
    tracked = procs.start(tmp_path, "sleeper", SLEEPER)
    assert tracked.is_alive()
    assert procs.read_tracked(tmp_path, "sleeper") == tracked
    assert procs.stop(tmp_path, "sleeper", grace=5) is True
    assert not tracked.is_alive()
    assert procs.read_tracked(tmp_path, "sleeper") is None


def test_process_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    tracked = procs.start(tmp_path, "stubborn", STUBBORN, cwd=tmp_path)
    deadline = time.monotonic() + 10
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs.stop(tmp_path, "stubborn", grace=0.5) is True
    assert not tracked.is_alive()


def test_stale_pid_file_pointing_at_a_reused_pid_is_not_killed(tmp_path: Path) -> None:
    # The pid file names this very test process, but with another start time: a reused pid.
    path = procs.pid_file(tmp_path, "ghost")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": os.getpid(), "start_ticks": 1, "log": "x"}))
    assert procs.stop(tmp_path, "ghost") is False
    assert procs.process_start_ticks(os.getpid()) is not None  # still alive: we are here


def test_stopping_something_never_started_is_a_no_op(tmp_path: Path) -> None:
    assert procs.stop(tmp_path, "never") is False


def test_output_goes_to_the_log_file(tmp_path: Path) -> None:
    tracked = procs.start(tmp_path, "echo", [sys.executable, "-c", "print('hello from child')"])
    deadline = time.monotonic() + 10
    while "hello from child" not in procs.tail(tracked.log) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "hello from child" in procs.tail(tracked.log)
