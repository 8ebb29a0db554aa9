"""A work queue of run keys with client-go's guarantees: a key waits at most once however often
it is added, one key is never processed by two workers at once, a key added while being
processed runs again afterwards, failures come back with exponential backoff, and a key is
scheduled for later at most once (the earliest time wins, as client-go's delaying queue does):
a reconcile that asks to look again in 10 s, run every 5 s by the resync, must not pile up
one more future reconcile each time.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque

# Backoff after a failed reconcile: 0.5 s, 1 s, 2 s, ... at most 5 minutes.
BASE_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 300.0


class WorkQueue:
    """Thread-safe; keys are strings like `namespace/name`."""

    def __init__(
        self, base_backoff: float = BASE_BACKOFF_SECONDS, max_backoff: float = MAX_BACKOFF_SECONDS
    ) -> None:
        self._lock = threading.Condition()
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._delayed: list[tuple[float, int, str]] = []
        # key -> when it is due: one live entry per key in `_delayed` (others are stale).
        self._waiting: dict[str, float] = {}
        self._sequence = 0
        self._failures: dict[str, int] = {}
        self._base = base_backoff
        self._max = max_backoff
        self._shutdown = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._queue)

    def add(self, key: str) -> None:
        with self._lock:
            self._add_locked(key)

    def _add_locked(self, key: str) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._lock.notify()

    def add_after(self, key: str, delay: float) -> None:
        """Add `key` once `delay` seconds have passed (at once when delay <= 0)."""
        if delay <= 0:
            self.add(key)
            return
        due = time.monotonic() + delay
        with self._lock:
            if self._waiting.get(key, float("inf")) <= due:
                return  # already due sooner
            self._waiting[key] = due
            self._sequence += 1
            heapq.heappush(self._delayed, (due, self._sequence, key))
            self._lock.notify()

    def add_rate_limited(self, key: str, at_least: float = 0.0) -> float:
        """Add after a backoff that doubles with each consecutive failure, and never sooner
        than `at_least` (a delay the reconcile asked for); returns the delay."""
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = max(float(min(self._base * (2**failures), self._max)), at_least)
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """The key succeeded: its next failure starts the backoff from the beginning."""
        with self._lock:
            self._failures.pop(key, None)

    def _promote_due_locked(self) -> float | None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            due, _seq, key = heapq.heappop(self._delayed)
            if self._waiting.get(key) != due:
                continue  # superseded by an earlier time
            del self._waiting[key]
            self._add_locked(key)
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float | None = None) -> str | None:
        """The next key to process, or None on shutdown or after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                next_due = self._promote_due_locked()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutdown:
                    return None
                wait = next_due
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._lock.wait(wait)

    def done(self, key: str) -> None:
        """Processing of `key` finished; if it was added meanwhile, queue it again."""
        with self._lock:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._lock.notify()

    def shutdown(self) -> None:
        with self._lock:
            self._shutdown = True
            self._lock.notify_all()
