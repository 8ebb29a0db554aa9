"""Stage results for the operator: one JSON object (at most 4 KB) in the termination log.

Keys are camelCase (data contract section 5); a failure keeps `stage`, `ok` and `message`
and trims the message so the JSON always fits.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from dflash_trainer.messages import shorten

log = logging.getLogger(__name__)

# Kubernetes keeps at most 4096 bytes of a termination message; the contract caps `message`.
TERMINATION_LIMIT = 4096
MAX_MESSAGE_CHARS = 400
DEFAULT_TERMINATION_LOG = "/dev/termination-log"

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
# The training likelihood monitor stopped training (a verdict, not a crash): the same number
# as an audit whose gate failed (data-contracts section 5). Never retried by the operator.
EXIT_MONITOR_STOPPED = 3


def build_stage_result(stage: str, ok: bool, message: str, **extra: Any) -> dict[str, Any]:
    message = shorten(message, MAX_MESSAGE_CHARS)
    result: dict[str, Any] = {"stage": stage, "ok": ok, "message": message}
    result.update(extra)
    encoded = json.dumps(result)
    if len(encoded.encode()) > TERMINATION_LIMIT:
        overflow = len(encoded.encode()) - TERMINATION_LIMIT + len(" [trimmed]") + 16
        result["message"] = message[: max(0, len(message) - overflow)] + " [trimmed]"
    return result


def write_stage_result(path: str | None, result: dict[str, Any]) -> None:
    """Write the result to `path`; without one, to `/dev/termination-log` only if it exists
    (the kubelet creates it; a laptop run writes nothing in /dev). A warning if we can't."""
    if path is None:
        if not Path(DEFAULT_TERMINATION_LOG).exists():
            return
        path = DEFAULT_TERMINATION_LOG
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(result))
    except OSError as exc:
        log.warning("could not write the stage result to %s: %s", path, exc.strerror)
