"""Running a container's command as a local process group: the argv (the image's Python is
the project's venv), the spawn, the per-pod process file, and the SIGTERM/SIGKILL helpers,
including `kill_pod()`, the hook tests use to crash a pod's process on purpose."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from dflash_dev import procs
from dflash_dev.errors import DevError

from .env import expand
from .errors import PodStartError

log = logging.getLogger(__name__)

# Every process of a container carries this in its environment (its sandbox root), so that the
# whole container can be signalled, as a PID namespace would be.
CONTAINER_ENV = "DFLASH_EXECUTOR_CONTAINER"
PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
# Where images keep their interpreter; such a path means "the image's Python" here.
IMAGE_PYTHON_DIRS = ("/usr/", "/opt/", "/bin/", "/venv/", "/app/")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Children die with their pod worker thread even if the executor is SIGKILLed (PR_SET_PDEATHSIG
# via util-linux's setpriv, which exec()s the command, so the pid stays the command's pid).
SETPRIV = shutil.which("setpriv")
WAIT_STEP_SECONDS = 0.05
PROCESS_FILE = "process.json"


def is_image_python(program: str) -> bool:
    path = PurePosixPath(program)
    if not PYTHON.match(path.name):
        return False
    return not path.is_absolute() or str(path).startswith(IMAGE_PYTHON_DIRS)


def build_argv(
    container: dict[str, Any], env: dict[str, str], python: Path, rewrite: Callable[[str], str]
) -> list[str]:
    """command + args with `$(VAR)` expanded and container paths rewritten (so a script in a
    configMap volume runs too); the program resolved as a container would resolve it.

    Raises PodStartError when there is nothing to run or the program cannot be found.
    """
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    if not command and args:
        # No `command`: the image's ENTRYPOINT + args. This project's images have an empty
        # ENTRYPOINT (images/*/Dockerfile), so the args are the whole command line, as the
        # operator's stage pods expect.
        command, args = args, []
    if not command:
        raise PodStartError(
            f"container {container.get('name')!r} has no command: the process executor cannot "
            'run an image\'s entrypoint; set `command` (for example ["python", "-m", ...])'
        )
    argv = [rewrite(expand(part, env)) for part in command + args]
    program = argv[0]
    if is_image_python(program):
        return [str(python), *argv[1:]]
    if "/" in program:
        if not os.access(program, os.X_OK):
            raise PodStartError(
                f'exec: "{program}": no such file or executable here (the executor runs commands '
                "from this machine, not from the image)"
            )
        return argv
    found = shutil.which(program, path=env.get("PATH", DEFAULT_PATH))
    if found is None:
        raise PodStartError(f'exec: "{program}": executable file not found in $PATH')
    return [found, *argv[1:]]


def spawn(
    argv: list[str], env: dict[str, str], cwd: Path, log_file: Path
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session (its own process group), output appended to `log_file`."""
    wrapped = [SETPRIV, "--pdeathsig", "KILL", "--", *argv] if SETPRIV else argv
    with log_file.open("ab") as out:
        return subprocess.Popen(
            wrapped,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def exit_code(returncode: int) -> int:
    """A container's exit code: 128 + signal number for a process killed by a signal."""
    return 128 - returncode if returncode < 0 else returncode


def container_pids(sandbox_root: str) -> list[int]:
    """Live processes whose environment carries the container's marker (CONTAINER_ENV): its
    processes, also those that left its process group. torchrun, for one, starts its workers
    in new sessions; in a container they would still die with it (one PID namespace)."""
    needle = f"\0{CONTAINER_ENV}={sandbox_root}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in b"\0" + environ:
            found.append(int(entry.name))
    return found


def signal_group(pid: int, sig: signal.Signals, sandbox_root: str | None = None) -> None:
    """`sig` to the process group, and with `sandbox_root` to every process of the container."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    for other in container_pids(sandbox_root) if sandbox_root else ():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(other, sig)


def stop(proc: subprocess.Popen[bytes], grace: float, sandbox_root: str | None = None) -> int:
    """SIGTERM the container's processes, SIGKILL them after `grace` seconds; the exit code."""
    signal_group(proc.pid, signal.SIGTERM, sandbox_root)
    deadline = time.monotonic() + grace
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(WAIT_STEP_SECONDS)
    signal_group(proc.pid, signal.SIGKILL, sandbox_root)
    return exit_code(proc.wait())


def write_process_file(sandbox: Path, pid: int) -> None:
    ticks = procs.process_start_ticks(pid) or 0
    (sandbox / PROCESS_FILE).write_text(json.dumps({"pid": pid, "start_ticks": ticks}))


def _live_pid(process_file: Path) -> int | None:
    try:
        data = json.loads(process_file.read_text())
        pid, ticks = int(data["pid"]), int(data["start_ticks"])
    except (OSError, ValueError, KeyError):
        return None
    return pid if procs.process_start_ticks(pid) == ticks else None


def kill_pod(
    namespace: str, pod: str, state_dir: Path, sig: signal.Signals = signal.SIGKILL
) -> int:
    """Send `sig` (SIGKILL: a crash) to the process group of a running pod; return its pid.

    The executor then sees the exit (137) and applies the restart policy, as after a crash.
    """
    for process_file in sorted((state_dir / "pods" / namespace / pod).glob(f"*/{PROCESS_FILE}")):
        pid = _live_pid(process_file)
        if pid is not None:
            signal_group(pid, sig, str(process_file.parent))
            return pid
    raise DevError(
        f"no running process for pod {namespace}/{pod} under {state_dir / 'pods'}: is it Running "
        "on a node of the executor that uses this state dir?"
    )


def kill_orphans(pods_dir: Path) -> int:
    """Kill process groups a previous executor left behind (it was SIGKILLed); return count."""
    killed = 0
    for process_file in pods_dir.glob(f"*/*/*/{PROCESS_FILE}"):
        pid = _live_pid(process_file)
        if pid is not None:
            log.warning(
                "killing process group %d left by a previous executor (%s)", pid, process_file
            )
            signal_group(pid, signal.SIGKILL, str(process_file.parent))
            killed += 1
        process_file.unlink(missing_ok=True)
    return killed
