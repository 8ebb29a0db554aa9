"""Which training workload kinds the API server serves (API discovery), cached for a short
while: `spec.training.launcher: auto` is decided from it (plan/launcher.py). Thread-safe; one
discovery request per kind at most every `DISCOVERY_TTL_SECONDS`, whatever the number of runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from dflash_operator.children.launchers import LAUNCHERS

# A newly installed Trainer or training-operator is noticed within this long.
DISCOVERY_TTL_SECONDS = 30.0
TRAINING_KINDS = tuple(launcher.kind.kind for launcher in LAUNCHERS.values())


class Discovers(Protocol):
    def serves(self, kind: str) -> bool | None: ...


class ServedKinds:
    """`served()`: the training kinds the cluster serves; None until discovery first answers
    for every kind (an unknown kind is never taken for a missing one)."""

    def __init__(
        self,
        kube: Discovers,
        ttl: float = DISCOVERY_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, bool] = {}
        self._checked_at: float | None = None

    def served(self) -> frozenset[str] | None:
        with self._lock:
            now = self.clock()
            if self._checked_at is None or now - self._checked_at >= self.ttl:
                self._checked_at = now
                for kind in TRAINING_KINDS:
                    answer = self.kube.serves(kind)
                    if answer is not None:  # a failed discovery keeps the last answer
                        self._known[kind] = answer
            if len(self._known) < len(TRAINING_KINDS):
                return None
            return frozenset(kind for kind, served in self._known.items() if served)
