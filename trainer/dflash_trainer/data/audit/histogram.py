"""Streaming summaries with flat memory: exact integer histograms and most-frequent strings.

Both merge batch by batch, so an audit's memory does not grow with the dataset.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Integer values (token counts) are counted exactly up to this bound; larger values share one
# overflow bin. 2^17 tokens is past every context length a drafter trains on.
HIST_CAP = 1 << 17
# Heavy hitters: each batch contributes its most frequent strings; a text that holds a share
# above 1/TOP_PER_BATCH of any batch is always counted exactly.
TOP_PER_BATCH = 64
TOP_KEEP = 4096
TEXT_KEY_CHARS = 512


class IntHistogram:
    """Exact counts of non-negative integers (bincount), with percentiles and the mode."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)
        self.max_value = 0

    def add(self, values: np.ndarray) -> None:
        if len(values) == 0:
            return
        values = np.asarray(values, dtype=np.int64)
        self.max_value = max(self.max_value, int(values.max()))
        binned = np.bincount(np.clip(values, 0, HIST_CAP), minlength=1)
        if len(binned) > len(self.counts):
            binned[: len(self.counts)] += self.counts
            self.counts = binned
        else:
            self.counts[: len(binned)] += binned

    def add_counts(self, counts: np.ndarray, max_value: int) -> None:
        """Add a bincount (index = value) whose largest original value was `max_value`."""
        self.max_value = max(self.max_value, max_value)
        if len(counts) > len(self.counts):
            grown = counts.astype(np.int64, copy=True)
            grown[: len(self.counts)] += self.counts
            self.counts = grown
        else:
            self.counts[: len(counts)] += counts

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def percentile(self, q: float) -> int:
        """The smallest value v with at least q% of the samples <= v (nearest rank)."""
        total = self.total
        if total == 0:
            return 0
        rank = max(1, int(np.ceil(q / 100.0 * total)))
        return int(np.searchsorted(np.cumsum(self.counts), rank))

    def mode(self) -> tuple[int, int]:
        """(most common value, its count)."""
        if self.total == 0:
            return 0, 0
        value = int(np.argmax(self.counts))
        return value, int(self.counts[value])

    def mode_share(self) -> float:
        return self.mode()[1] / self.total if self.total else 0.0

    def count_below(self, bound: int) -> int:
        return int(self.counts[: max(0, bound)].sum())

    def summary(self) -> dict[str, Any]:
        mode, count = self.mode()
        return {
            "count": self.total,
            "p1": self.percentile(1),
            "p10": self.percentile(10),
            "p50": self.percentile(50),
            "p90": self.percentile(90),
            "p99": self.percentile(99),
            "max": self.max_value,
            "mode": mode,
            "modeShare": round(count / self.total, 6) if self.total else 0.0,
        }


class TopValues:
    """Approximate counts of the most frequent strings (exact for heavy hitters)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.total = 0

    def add(self, texts: pa.Array) -> None:
        self.total += len(texts)
        if len(texts) == 0:
            return
        key = pc.utf8_slice_codeunits(texts.fill_null(""), 0, TEXT_KEY_CHARS)
        vc = pc.value_counts(key)
        counts = vc.field("counts").to_numpy()
        top = np.argsort(counts)[::-1][:TOP_PER_BATCH]
        values = vc.field("values")
        for i in top:
            self.counts[values[int(i)].as_py()] += int(counts[i])
        if len(self.counts) > 2 * TOP_KEEP:
            self.counts = Counter(dict(self.counts.most_common(TOP_KEEP)))

    def top(self) -> tuple[str, int]:
        if not self.counts:
            return "", 0
        text, count = self.counts.most_common(1)[0]
        return text, count

    def top_share(self) -> float:
        return self.top()[1] / self.total if self.total else 0.0
