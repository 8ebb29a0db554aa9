"""Completions gate metrics over regenerated answers (contract section 3), per source, streaming.

Per-row features come from `completion_features`; here they become per-source counters, exact
length histograms (generated and reasoning tokens), duplicate counts and the silent-truncation
spike, with the (events, trials) behind every rate for the confidence bound of `checks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from dflash_trainer.data.audit.completion_features import (
    BYTES_PER_TOKEN_ESTIMATE,
    CompletionSettings,
    completion_features,
    whole_completion_texts,
)
from dflash_trainer.data.audit.histogram import IntHistogram, TopValues
from dflash_trainer.data.audit.metrics import (
    OVERALL,
    Counters,
    GateMetrics,
    GroupMetrics,
    SourceIndex,
    add_histograms,
    length_floors,
    overall_histogram,
    ratio,
)
from dflash_trainer.data.audit.text_keys import count_duplicates, duplicated_keys
from dflash_trainer.data.audit.thresholds import Thresholds

COUNTERS = ("samples", "empty_response", "empty_thinking", "near_empty_thinking", "stub",
            "truncated", "stray_think", "estimated_tokens", "output_tokens", "finish_unknown",
            "at_limit", "loop_measured", "loop", "language_judged", "wrong_language")  # fmt: skip
OUTPUT_TOKENS_PLOT = "output_tokens"
THINKING_TOKENS_PLOT = "thinking_tokens"
TOP_TEXT_CHARS = 200
# A spike at the top of a source's lengths is silent truncation when it holds at least this
# many rows and this share of the rows whose length is known (a healthy source's longest
# answer is one of a kind).
SPIKE_MIN_ROWS = 5
SPIKE_MIN_SHARE = 0.01
# ... and at least this share of the rows at the spike are distinct texts.
SPIKE_MIN_DISTINCT_SHARE = 0.5
DUPLICATES_SHOWN = 8


def top_spike(hist: IntHistogram) -> int | None:
    """The length of a spike at the very top of a length histogram, if there is one."""
    total = hist.total
    if total == 0:
        return None
    top = int(np.flatnonzero(hist.counts)[-1])
    mode, count = hist.mode()
    if mode == top and count >= SPIKE_MIN_ROWS and count >= SPIKE_MIN_SHARE * total:
        return top
    return None


class CompletionsAccumulator:
    """Streams completion batches into per-source counters, histograms, keys and top answers."""

    def __init__(self, thresholds: Thresholds, settings: CompletionSettings | None = None) -> None:
        self.thresholds = thresholds
        self.settings = settings or CompletionSettings()
        self.sources = SourceIndex()
        self.counters = Counters(COUNTERS)
        self.length_hist: dict[str, IntHistogram] = {}
        self.thinking_hist: dict[str, IntHistogram] = {}
        # Lengths of rows not reported as cut, whose length is known: where silent cuts show.
        self.unreported_hist: dict[str, IntHistogram] = {}
        self.unknown_finish_hist: dict[str, IntHistogram] = {}
        self.exact_keys: dict[str, list[np.ndarray]] = {}
        self.near_keys: dict[str, list[np.ndarray]] = {}
        # Per row, aligned with the keys: its length when it could be silently cut, else -1.
        self.unreported_lengths: dict[str, list[np.ndarray]] = {}
        self.top: dict[str, TopValues] = {}
        self.top_all = TopValues()

    @staticmethod
    def columns() -> list[str]:
        return ["source", "prompt", "response", "reasoning", "finish_reason",
                "num_output_tokens", "output_token_ids"]  # fmt: skip

    def add(self, batch: pa.RecordBatch) -> None:
        rows = batch.num_rows
        if rows == 0:
            return
        src_col = batch.column("source") if "source" in batch.schema.names else None
        src = self.sources.encode(src_col, rows)
        names = self.sources.names
        n = len(names)
        feats = completion_features(batch, self.thresholds, self.settings)
        self.counters.add("samples", src, None, n)
        for name in COUNTERS[1:]:
            if name in feats:
                self.counters.add(name, src, feats[name].astype(np.float64), n)
        add_histograms(self.length_hist, feats["output_tokens"], src, names)
        if "thinking_tokens" in feats:
            # Reasoning lengths of the rows that reason: empty thinking has its own check.
            thinks = ~feats["empty_thinking"]
            add_histograms(self.thinking_hist, feats["thinking_tokens"][thinks], src[thinks], names)
        unreported = feats["known_tokens"] & ~feats["truncated"]
        add_histograms(
            self.unreported_hist, feats["output_tokens"][unreported], src[unreported], names
        )
        unknown = unreported & feats["finish_unknown"]
        add_histograms(
            self.unknown_finish_hist, feats["output_tokens"][unknown], src[unknown], names
        )
        response = whole_completion_texts(batch)
        self.top_all.add(response)
        for i in np.unique(src):
            name = names[int(i)]
            mine = src == i
            self.top.setdefault(name, TopValues()).add(response.filter(pa.array(mine)))
            self.exact_keys.setdefault(name, []).append(feats["exact_key"][mine])
            self.near_keys.setdefault(name, []).append(feats["near_key"][mine])
            lengths = np.where(unreported, feats["output_tokens"], -1)[mine].astype(np.int32)
            self.unreported_lengths.setdefault(name, []).append(lengths)

    # --- per group ----------------------------------------------------------------------------
    def _silent(self, name: str | None) -> tuple[int, int, list[int]]:
        """(silently cut rows, of which finish unknown, the lengths they sit at)."""
        hists = self.unreported_hist if name is None else {name: self.unreported_hist.get(name)}
        silent = probable = 0
        at: set[int] = set()
        for source, hist in hists.items():
            if hist is None:
                continue
            unknown = self.unknown_finish_hist.get(source or "", IntHistogram())
            spike = top_spike(hist)
            values = [spike] if spike is not None and self._is_diverse(source, spike) else []
            limit = self.settings.max_new_tokens
            if limit:  # rows at or above the limit are counted by `at_limit` already
                values = [v for v in values if v < limit]
            for value in values:
                silent += int(hist.counts[value])
                probable += int(unknown.counts[value]) if value < len(unknown.counts) else 0
                at.add(value)
        return silent, probable, sorted(at)

    def _is_diverse(self, source: str, length: int) -> bool:
        """Whether the rows at a length spike are mostly different texts: answers cut at one
        token count are (different prompts), a stub repeated everywhere (`OK.`) is not; that
        is stub_rate's and duplicate_completion_rate's business, not truncation."""
        lengths = np.concatenate(self.unreported_lengths.get(source) or [np.zeros(0, np.int32)])
        near = np.concatenate(self.near_keys.get(source) or [np.zeros(0, np.uint64)])
        at = near[lengths == length]
        return len(at) > 0 and len(np.unique(at)) >= SPIKE_MIN_DISTINCT_SHARE * len(at)

    def _group(
        self,
        name: str | None,
        get: dict[str, float],
        hist: IntHistogram,
        thinking: IntHistogram | None,
        top: TopValues,
        keys: tuple[np.ndarray, np.ndarray],
    ) -> GroupMetrics:
        t = self.thresholds
        samples = int(get["samples"])
        spike_rows, spike_unknown, spike_at = self._silent(name)
        at_limit = get["at_limit"]
        silent = at_limit + spike_rows
        exact_dups, near_dups = count_duplicates(keys[0]), count_duplicates(keys[1])
        events = {
            "empty_response_rate": get["empty_response"],
            "stub_rate": get["stub"],
            "truncation_rate": get["truncated"],
            "stray_think_rate": get["stray_think"],
            "silent_truncation_rate": silent,
            "duplicate_completion_rate": near_dups,
        }
        counts = {check: (value, float(samples)) for check, value in events.items()}
        top_text, top_count = top.top()
        counts["top_response_share"] = (float(top_count), float(samples))
        floor_counts, floor_values = length_floors("completion_tokens", hist, t)
        counts |= floor_counts
        if get["loop_measured"]:
            counts["repetition_rate"] = (get["loop"], get["loop_measured"])
        if get["language_judged"]:
            counts["wrong_language_rate"] = (get["wrong_language"], get["language_judged"])
        if t.expect_thinking and thinking is not None:
            counts["empty_thinking_rate"] = (get["empty_thinking"], float(samples))
            counts["near_empty_thinking_rate"] = (get["near_empty_thinking"], float(samples))
            thinking_counts, thinking_values = length_floors("thinking_tokens", thinking, t)
            counts |= thinking_counts
            floor_values |= thinking_values
        values = {"samples": float(samples)}
        for check, (ev, trials) in counts.items():
            values[check] = ratio(ev, trials)
        values |= floor_values  # the floors' values are the percentiles, not the shares
        dup_keys, dup_counts = duplicated_keys(keys[1], DUPLICATES_SHOWN)
        details: dict[str, Any] = {
            "outputTokens": hist.summary(),
            "totalOutputTokens": int(get["output_tokens"]),
            "estimatedTokenRows": int(get["estimated_tokens"]),
            "topResponse": {"text": top_text[:TOP_TEXT_CHARS], "count": top_count},
            "truncation": {
                "reported": int(get["truncated"]),
                "finishUnknown": int(get["finish_unknown"]),
                "atLimit": int(at_limit),
                "atTopSpike": spike_rows,
                "topSpikeLengths": spike_at,
                "probablyTruncated": int(spike_unknown + self._unknown_at_limit(name)),
            },
            "duplicates": {
                "exact": exact_dups,
                "near": near_dups,
                "mostRepeated": [
                    {"key": f"{int(k):016x}", "rows": int(c)}
                    for k, c in zip(dup_keys, dup_counts, strict=True)
                ],
            },
            "repetition": {"measured": int(get["loop_measured"]), "loops": int(get["loop"])},
            "language": {
                "judged": int(get["language_judged"]),
                "wrong": int(get["wrong_language"]),
            },
        }
        if thinking is not None and t.expect_thinking:
            details["thinkingTokens"] = thinking.summary()
        return GroupMetrics(samples=samples, values=values, details=details, counts=counts)

    def _unknown_at_limit(self, name: str | None) -> int:
        limit = self.settings.max_new_tokens
        if not limit:
            return 0
        hists = (
            self.unknown_finish_hist.values()
            if name is None
            else [self.unknown_finish_hist.get(name)]
        )
        return sum(int(h.counts[limit:].sum()) for h in hists if h is not None)

    def _keys(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        empty = np.zeros(0, dtype=np.uint64)
        exact = self.exact_keys.get(name)
        near = self.near_keys.get(name)
        return (
            np.concatenate(exact) if exact else empty,
            np.concatenate(near) if near else empty,
        )

    def finish(self) -> GateMetrics:
        c = self.counters
        sources = {}
        dup_overall = [np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)]
        for i, name in enumerate(self.sources.names):
            get = {k: c.get(k, i) for k in COUNTERS}
            keys = self._keys(name)
            sources[name] = self._group(
                name, get, self.length_hist[name], self.thinking_hist.get(name),
                self.top[name], keys,
            )  # fmt: skip
        for group in sources.values():
            dup_overall[0] = np.append(dup_overall[0], group.details["duplicates"]["exact"])
            dup_overall[1] = np.append(dup_overall[1], group.details["duplicates"]["near"])
        hist_all = overall_histogram(self.length_hist)
        thinking_all = overall_histogram(self.thinking_hist) if self.thinking_hist else None
        # Duplicates are counted within each source; overall is their sum.
        overall = self._group(
            None, {k: c.total(k) for k in COUNTERS}, hist_all, thinking_all, self.top_all,
            (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)),
        )  # fmt: skip
        samples = float(overall.samples)
        exact_total, near_total = int(dup_overall[0].sum()), int(dup_overall[1].sum())
        overall.counts["duplicate_completion_rate"] = (float(near_total), samples)
        overall.values["duplicate_completion_rate"] = ratio(near_total, samples)
        overall.details["duplicates"] = {
            "exact": exact_total,
            "near": near_total,
            "mostRepeated": [],
        }
        self.length_hist[OVERALL] = hist_all
        histograms = {OUTPUT_TOKENS_PLOT: self.length_hist}
        if thinking_all is not None:
            self.thinking_hist[OVERALL] = thinking_all
            histograms[THINKING_TOKENS_PLOT] = self.thinking_hist
        return GateMetrics("completions", overall, sources, histograms, self._notes())

    def _notes(self) -> list[str]:
        c = self.counters
        notes = []
        if c.total("estimated_tokens"):
            notes.append(
                f"{int(c.total('estimated_tokens'))} rows have no num_output_tokens: their "
                f"generated length is estimated as UTF-8 bytes / {BYTES_PER_TOKEN_ESTIMATE}"
            )
        if c.total("finish_unknown"):
            notes.append(
                f"{int(c.total('finish_unknown'))} rows have no finish_reason: those at the "
                "generation limit or at a spike at the top of their source's lengths are "
                "counted as probably truncated"
            )
        unmeasured = c.total("samples") - c.total("loop_measured")
        if unmeasured:
            notes.append(
                f"repetition measured on {int(c.total('loop_measured'))} rows with engine token "
                f"ids; {int(unmeasured)} rows have none or are too short"
            )
        if self.settings.max_new_tokens is None:
            notes.append(
                "the generation limit is unknown (--max-new-tokens): silent truncation is found "
                "only as a spike at the top of each source's lengths"
            )
        if self.thresholds.expect_thinking and (
            self.settings.vocab is None or not self.settings.vocab.knows_whitespace
        ):
            notes.append("reasoning tokens are estimated from the text (no --model)")
        return notes
