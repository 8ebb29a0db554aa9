"""Container logs on disk: `<state-dir>/logs/<namespace>/<pod>/<container>.log`, appended
across restarts (and pod re-creations) with a marker line before each start; termination
messages read like kubelet reads them. `executor_logs()` is how users and tests read logs."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from pathlib import Path

from dflash_dev.errors import DevError
from dflash_dev.paths import state_root

# kubelet's limits (pkg/kubelet/container): termination message file, and the log fallback.
MAX_MESSAGE_BYTES = 4096
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048
MARKER = "=== dflash-executor:"
MARKER_COMMAND_CHARS = 500  # enough to recognise the command; scripts can be long


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def default_state_dir() -> Path:
    """Where `make executor-up` keeps its state (`DFLASH_STATE_DIR` moves it)."""
    return state_root() / "executor"


def log_path(state_dir: Path, namespace: str, pod: str, container: str) -> Path:
    return state_dir / "logs" / namespace / pod / f"{container}.log"


def begin(path: Path, uid: str, restart_count: int, argv: list[str]) -> int:
    """Append the start marker; return the offset where this run's output begins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        command = shlex.join(argv).replace("\n", "\\n")[:MARKER_COMMAND_CHARS]
        line = f"{MARKER} {now()} start pod uid {uid} restart {restart_count}: {command} ===\n"
        out.write(line.encode())
        return out.tell()


def note(path: Path, text: str) -> None:
    """Append an executor note (exit code, kill) so the log tells the whole story."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        out.write(f"{MARKER} {now()} {text} ===\n".encode())


def _tail_bytes(path: Path, start: int, limit: int) -> bytes:
    try:
        with path.open("rb") as src:
            size = src.seek(0, 2)
            begin_at = max(start, size - limit)
            src.seek(begin_at)
            return src.read(size - begin_at)
    except OSError:
        return b""


def termination_message(path: Path) -> str:
    """The last 4096 bytes of the termination-message file (kubelet keeps the tail too)."""
    return _tail_bytes(path, 0, MAX_MESSAGE_BYTES).decode(errors="replace")


def fallback_message(path: Path, start: int) -> str:
    """The last 80 lines, at most 2048 bytes, of this run's output (FallbackToLogsOnError)."""
    text = _tail_bytes(path, start, 64 * FALLBACK_BYTES).decode(errors="replace")
    lines = text.splitlines(keepends=True)[-FALLBACK_LINES:]
    tail = "".join(lines).encode()[-FALLBACK_BYTES:]
    return tail.decode(errors="ignore")


def executor_logs(
    namespace: str, pod: str, container: str | None = None, state_dir: Path | None = None
) -> str:
    """The whole log of a pod's container (the first one found when `container` is None)."""
    base = state_dir or default_state_dir()
    folder = base / "logs" / namespace / pod
    if container is not None:
        path = folder / f"{container}.log"
    else:
        found = sorted(folder.glob("*.log"))
        if not found:
            raise DevError(
                f"no logs for pod {namespace}/{pod} under {base / 'logs'}: the executor has not "
                "run it (is it scheduled on an executor node? `kubectl get pod -o wide`)"
            )
        path = found[0]
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        known = ", ".join(p.stem for p in sorted(folder.glob("*.log"))) or "none"
        raise DevError(
            f"no log for container {container!r} of pod {namespace}/{pod} (containers with logs: {known})"
        ) from None
