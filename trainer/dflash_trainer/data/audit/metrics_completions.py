"""Completions gate metrics over regenerated answers (contract section 3), per source, streaming.

Empty answers, empty thinking, stubs (few generated tokens), truncation, stray think tags, the
most repeated answer text, and generated-length percentiles; all with pyarrow compute kernels.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dflash_trainer.data.audit.histogram import IntHistogram, TopValues
from dflash_trainer.data.audit.metrics import (
    OVERALL,
    Counters,
    GateMetrics,
    GroupMetrics,
    SourceIndex,
    add_histograms,
    overall_histogram,
    ratio,
)
from dflash_trainer.data.audit.thresholds import Thresholds

COUNTERS = ("samples", "empty_response", "empty_thinking", "stub", "truncated", "stray_think",
            "estimated_tokens", "output_tokens")  # fmt: skip
# Without token counts (completions made elsewhere), generated tokens are estimated from the
# UTF-8 size: ~4 bytes per token is typical of byte-level BPE on English text and code.
BYTES_PER_TOKEN_ESTIMATE = 4
OUTPUT_TOKENS_PLOT = "output_tokens"
TOP_TEXT_CHARS = 200


def _strings(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    return col.cast(pa.large_string()) if not pa.types.is_large_string(col.type) else col


def completion_features(batch: pa.RecordBatch, thresholds: Thresholds) -> dict[str, np.ndarray]:
    """Per-row features of one batch of completions."""
    rows = batch.num_rows
    response = _strings(batch, "response")
    if response is None:
        raise ValueError("completion batches need a 'response' column")
    response = response.fill_null("")
    empty = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(response)), 0)
    stray = pc.or_(
        pc.match_substring(response, "<think>"), pc.match_substring(response, "</think>")
    )
    finish = batch.column("finish_reason").fill_null("")
    feats = {
        "empty_response": empty.to_numpy(zero_copy_only=False),
        "stray_think": stray.to_numpy(zero_copy_only=False),
        "truncated": pc.equal(finish, "length").to_numpy(zero_copy_only=False),
    }
    reasoning = _strings(batch, "reasoning")
    if thresholds.expect_thinking:
        if reasoning is None:
            feats["empty_thinking"] = np.ones(rows, dtype=bool)
        else:
            blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(reasoning.fill_null(""))), 0)
            feats["empty_thinking"] = blank.to_numpy(zero_copy_only=False)
    size = pc.binary_length(response).to_numpy(zero_copy_only=False).astype(np.int64)
    if reasoning is not None:
        size += pc.binary_length(reasoning.fill_null("")).to_numpy(zero_copy_only=False)
    estimate = -(-size // BYTES_PER_TOKEN_ESTIMATE)
    if "num_output_tokens" in batch.schema.names:
        col = batch.column("num_output_tokens")
        known = col.is_valid().to_numpy(zero_copy_only=False)
        counts = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        tokens = np.where(known, counts, estimate)
    else:
        known = np.zeros(rows, dtype=bool)
        tokens = estimate
    feats["output_tokens"] = tokens
    feats["estimated_tokens"] = ~known
    feats["stub"] = tokens < thresholds.stub_tokens
    return feats


class CompletionsAccumulator:
    """Streams completion batches into per-source counters, histograms and top answers."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self.sources = SourceIndex()
        self.counters = Counters(COUNTERS)
        self.length_hist: dict[str, IntHistogram] = {}
        self.top: dict[str, TopValues] = {}
        self.top_all = TopValues()

    @staticmethod
    def columns() -> list[str]:
        return ["source", "response", "reasoning", "finish_reason", "num_output_tokens"]

    def add(self, batch: pa.RecordBatch) -> None:
        rows = batch.num_rows
        if rows == 0:
            return
        src_col = batch.column("source") if "source" in batch.schema.names else None
        src = self.sources.encode(src_col, rows)
        n = len(self.sources.names)
        feats = completion_features(batch, self.thresholds)
        self.counters.add("samples", src, None, n)
        for name in COUNTERS[1:]:
            if name in feats:
                self.counters.add(name, src, feats[name].astype(np.float64), n)
        add_histograms(self.length_hist, feats["output_tokens"], src, self.sources.names)
        response = batch.column("response")
        self.top_all.add(response)
        for i in np.unique(src):
            name = self.sources.names[int(i)]
            self.top.setdefault(name, TopValues()).add(response.filter(pa.array(src == i)))

    def _group(self, get: dict[str, float], hist: IntHistogram, top: TopValues) -> GroupMetrics:
        samples = int(get["samples"])
        values = {
            "samples": float(samples),
            "empty_response_rate": ratio(get["empty_response"], samples),
            "stub_rate": ratio(get["stub"], samples),
            "truncation_rate": ratio(get["truncated"], samples),
            "stray_think_rate": ratio(get["stray_think"], samples),
            "top_response_share": top.top_share(),
        }
        if self.thresholds.expect_thinking:
            values["empty_thinking_rate"] = ratio(get["empty_thinking"], samples)
        text, count = top.top()
        details = {
            "outputTokens": hist.summary(),
            "totalOutputTokens": int(get["output_tokens"]),
            "estimatedTokenRows": int(get["estimated_tokens"]),
            "topResponse": {"text": text[:TOP_TEXT_CHARS], "count": count},
        }
        return GroupMetrics(samples=samples, values=values, details=details)

    def finish(self) -> GateMetrics:
        c = self.counters
        sources = {}
        for i, name in enumerate(self.sources.names):
            get = {k: c.get(k, i) for k in COUNTERS}
            sources[name] = self._group(get, self.length_hist[name], self.top[name])
        hist_all = overall_histogram(self.length_hist)
        overall = self._group({k: c.total(k) for k in COUNTERS}, hist_all, self.top_all)
        self.length_hist[OVERALL] = hist_all
        notes = []
        if c.total("estimated_tokens"):
            notes.append(
                f"{int(c.total('estimated_tokens'))} rows have no num_output_tokens: their "
                f"generated length is estimated as UTF-8 bytes / {BYTES_PER_TOKEN_ESTIMATE}"
            )
        return GateMetrics(
            "completions", overall, sources, {OUTPUT_TOKENS_PLOT: self.length_hist}, notes
        )
