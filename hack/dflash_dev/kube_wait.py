"""Small polling helpers for tests and scripts that watch the local cluster."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
DEFAULT_TIMEOUT = 60.0
POLL_SECONDS = 0.3


class Kubectl(Protocol):
    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> Any: ...


def wait_for(what: str, check: Callable[[], T], timeout: float = DEFAULT_TIMEOUT) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(POLL_SECONDS)


def get_json(cluster: Kubectl, *args: str) -> Any:
    """`kubectl get <args> -o json`, parsed."""
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def local_readyz(port: int) -> bool:
    """A controller's health probe on loopback answers 200 at /readyz."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False
