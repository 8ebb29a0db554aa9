"""Tokens gate metrics over `input_ids` / `loss_mask` batches: vectorized, per source, streaming.

Per row: loss-mask sum, longest supervised run (DFlash anchors), thinking span, truncation,
re-tokenization drift. Rows are never visited one by one in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from dflash_trainer.data.audit.histogram import IntHistogram
from dflash_trainer.data.audit.lists import (
    first_position,
    first_run_start,
    flatten_list,
    longest_run,
    run_sums,
    runs_of_ones,
)
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

COUNTERS = (
    "samples", "tokens", "supervised", "stub", "no_anchor", "truncated", "truncation_known",
    "thinking_missing", "empty_thinking", "drift_checked", "drift",
)  # fmt: skip
LOSS_MASK_PLOT = "loss_mask_sum"
SEQ_LEN_PLOT = "seq_len"


@dataclass(frozen=True)
class TokenAuditSettings:
    block_size: int = 16
    max_seq_len: int | None = None
    think_start_id: int | None = None
    think_end_id: int | None = None

    @property
    def needs_input_ids(self) -> bool:
        return self.think_end_id is not None


def token_features(
    batch: pa.RecordBatch, settings: TokenAuditSettings, thresholds: Thresholds
) -> dict[str, np.ndarray]:
    """Per-row features of one batch (each array has one entry per row)."""
    mask = flatten_list(batch.column("loss_mask"), np.int8)
    rows = mask.rows
    if len(mask.values) and (mask.values.min() < 0 or mask.values.max() > 1):
        raise ValueError("loss_mask values must be 0 or 1")
    runs = runs_of_ones(mask)
    sums = run_sums(runs, rows)
    feats: dict[str, np.ndarray] = {
        "mask_sum": sums,
        "seq_len": mask.lengths,
        "stub": sums < thresholds.stub_tokens,
        "no_anchor": longest_run(runs, rows) < settings.block_size + 1,
    }
    names = batch.schema.names
    if "truncated" in names:
        col = batch.column("truncated")
        feats["truncation_known"] = np.ones(rows, dtype=bool)
        feats["truncated"] = col.fill_null(False).to_numpy(zero_copy_only=False)
    elif settings.max_seq_len:
        feats["truncation_known"] = np.ones(rows, dtype=bool)
        feats["truncated"] = mask.lengths >= settings.max_seq_len
    if "retokenize_drift" in names:
        col = batch.column("retokenize_drift")
        feats["drift_checked"] = col.is_valid().to_numpy(zero_copy_only=False)
        feats["drift"] = col.fill_null(False).to_numpy(zero_copy_only=False)
    if settings.think_end_id is not None and "input_ids" in names:
        ids = flatten_list(batch.column("input_ids"), np.int32)
        hits = np.flatnonzero(ids.values == settings.think_end_id)
        end = first_position(hits[mask.values[hits] == 1], ids.offsets, rows)
        start = first_run_start(runs, rows)
        opens = np.zeros(rows, dtype=np.int64)
        if settings.think_start_id is not None:
            valid = start >= 0
            opens[valid] = ids.values[start[valid]] == settings.think_start_id
        has_end = end >= 0
        thinking = np.where(has_end, end - start - opens, 0)
        feats["thinking_tokens"] = thinking
        feats["thinking_missing"] = ~has_end & (sums > 0)
        feats["empty_thinking"] = has_end & (thinking < thresholds.min_thinking_tokens)
    return feats


class TokensAccumulator:
    """Streams batches into per-source counters and loss-mask / length histograms."""

    def __init__(self, settings: TokenAuditSettings, thresholds: Thresholds) -> None:
        self.settings = settings
        self.thresholds = thresholds
        self.sources = SourceIndex()
        self.counters = Counters(COUNTERS)
        self.mask_hist: dict[str, IntHistogram] = {}
        self.len_hist: dict[str, IntHistogram] = {}
        self.thinking_hist: dict[str, IntHistogram] = {}

    def columns(self) -> list[str]:
        cols = ["source", "loss_mask", "truncated", "retokenize_drift"]
        return [*cols, "input_ids"] if self.settings.needs_input_ids else cols

    def add(self, batch: pa.RecordBatch) -> None:
        rows = batch.num_rows
        if rows == 0:
            return
        src_col = batch.column("source") if "source" in batch.schema.names else None
        src = self.sources.encode(src_col, rows)
        n = len(self.sources.names)
        feats = token_features(batch, self.settings, self.thresholds)
        c = self.counters
        c.add("samples", src, None, n)
        c.add("tokens", src, feats["seq_len"].astype(np.float64), n)
        c.add("supervised", src, feats["mask_sum"].astype(np.float64), n)
        for name in ("stub", "no_anchor", "truncated", "truncation_known", "drift_checked",
                     "drift", "thinking_missing", "empty_thinking"):  # fmt: skip
            if name in feats:
                c.add(name, src, feats[name].astype(np.float64), n)
        add_histograms(self.mask_hist, feats["mask_sum"], src, self.sources.names)
        add_histograms(self.len_hist, feats["seq_len"], src, self.sources.names)
        if "thinking_tokens" in feats:
            add_histograms(self.thinking_hist, feats["thinking_tokens"], src, self.sources.names)

    def _group(
        self, get: dict[str, float], mask_hist: IntHistogram, len_hist: IntHistogram
    ) -> GroupMetrics:
        samples = int(get["samples"])
        mode, mode_count = mask_hist.mode()
        values = {
            "samples": float(samples),
            "loss_mask_mode_share": mask_hist.mode_share(),
            "stub_rate": ratio(get["stub"], samples),
            "no_anchor_rate": ratio(get["no_anchor"], samples),
            "supervised_fraction": ratio(get["supervised"], get["tokens"]),
            "supervised_tokens": get["supervised"],
        }
        if get["truncation_known"]:
            values["seq_truncation_rate"] = ratio(get["truncated"], get["truncation_known"])
        if self.settings.think_end_id is not None and self.thresholds.expect_thinking:
            values["thinking_missing_rate"] = ratio(get["thinking_missing"], samples)
            values["empty_thinking_rate"] = ratio(get["empty_thinking"], samples)
        if get["drift_checked"]:
            values["drift_rate"] = ratio(get["drift"], get["drift_checked"])
        details = {
            "tokens": int(get["tokens"]),
            "supervisedTokens": int(get["supervised"]),
            "lossMaskSum": mask_hist.summary(),
            "lossMaskMode": {"value": mode, "count": mode_count},
            "seqLen": len_hist.summary(),
            "driftChecked": int(get["drift_checked"]),
        }
        return GroupMetrics(samples=samples, values=values, details=details)

    def finish(self) -> GateMetrics:
        c = self.counters
        sources = {}
        for i, name in enumerate(self.sources.names):
            get = {k: c.get(k, i) for k in COUNTERS}
            sources[name] = self._group(get, self.mask_hist[name], self.len_hist[name])
        mask_all = overall_histogram(self.mask_hist)
        len_all = overall_histogram(self.len_hist)
        overall = self._group({k: c.total(k) for k in COUNTERS}, mask_all, len_all)
        self.mask_hist[OVERALL] = mask_all
        self.len_hist[OVERALL] = len_all
        notes = []
        if self.settings.think_end_id is None and self.thresholds.expect_thinking:
            notes.append(
                "thinking checks skipped: the `</think>` token id is unknown "
                "(pass --model, or audit a tokenized/ folder with its _SUCCESS.json)"
            )
        histograms = {LOSS_MASK_PLOT: self.mask_hist, SEQ_LEN_PLOT: self.len_hist}
        return GateMetrics("tokens", overall, sources, histograms, notes)
