"""Stage results: exit codes and the termination-message JSON (contract section 5, <= 4 KB).

Every data stage ends through `finish_stage`, so the operator always finds a parseable summary.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dflash_trainer.messages import shorten

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_GATE_FAILED = 3
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# Kubernetes keeps at most 4096 bytes of a termination message.
MAX_MESSAGE_BYTES = 4096
MAX_TEXT_CHARS = 400


def _size(payload: dict[str, Any]) -> int:
    return len(json.dumps(payload, separators=(",", ":")).encode())


def build_termination_message(payload: dict[str, Any]) -> str:
    """Compact JSON that fits in 4 KB: long texts are cut, then list entries dropped from the end."""
    out = json.loads(json.dumps(payload))
    if isinstance(out.get("message"), str):
        out["message"] = shorten(out["message"], MAX_TEXT_CHARS)
    violations = out.get("violations")
    if isinstance(violations, list):
        for v in violations:
            if isinstance(v, dict):
                v.pop("perSource", None)
                if isinstance(v.get("message"), str):
                    v["message"] = v["message"][:MAX_TEXT_CHARS]
        while _size(out) > MAX_MESSAGE_BYTES and len(violations) > 1:
            violations.pop()
            out["violationsTruncated"] = True
    for key in ("metrics", "examples", "issues"):
        if _size(out) > MAX_MESSAGE_BYTES and key in out:
            out.pop(key)
    if _size(out) > MAX_MESSAGE_BYTES:
        out = {k: out[k] for k in ("stage", "ok", "message") if k in out}
    return json.dumps(out, separators=(",", ":"))


def write_termination_message(payload: dict[str, Any], path: str | None) -> None:
    """Write the summary where Kubernetes looks for it. Without an explicit path the default is
    used only if it exists (the kubelet creates it), so a run on a laptop writes nothing in /dev."""
    target = Path(path or DEFAULT_TERMINATION_LOG)
    if path is None and not target.exists():
        return
    target.write_text(build_termination_message(payload))


def finish_stage(payload: dict[str, Any], code: int, path: str | None) -> int:
    """Write the termination message, print the one-line outcome, return the exit code."""
    write_termination_message(payload, path)
    if code != EXIT_OK:
        print(f"error: {payload.get('message', '')}", file=sys.stderr)
    return code
