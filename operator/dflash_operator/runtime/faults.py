"""Test-only fault hook: `DFLASH_FAULT_POINT=<name>[,<name>...]` makes the process die with
exit code 137 (as after SIGKILL) the first time it reaches a named point. Unset (always, in
production) every call is a set lookup and nothing else.

Points: `after-create:<kind>:<stage>`, `after-apply-config`, `after-suspend:<stage>`,
`after-delete:<stage>`, `before-status:<phase>`, `after-status:<phase>`, `after-events`.
"""

from __future__ import annotations

import logging
import os
import sys

ENV = "DFLASH_FAULT_POINT"
KILLED_EXIT_CODE = 137
log = logging.getLogger(__name__)

_ARMED: frozenset[str] = frozenset(
    point.strip() for point in os.environ.get(ENV, "").split(",") if point.strip()
)


def armed() -> frozenset[str]:
    return _ARMED


def fault_point(name: str) -> None:
    """Die here if the environment armed this point (tests of crash safety)."""
    if name in _ARMED:
        log.warning("fault point %s reached: exiting with %d", name, KILLED_EXIT_CODE)
        sys.stderr.flush()
        os._exit(KILLED_EXIT_CODE)
