"""Tokens gate metrics over `input_ids` / `loss_mask` batches: vectorized, per source, streaming.

Per row: loss-mask sum, longest supervised run (DFlash anchors), reasoning tokens, truncation,
re-tokenization drift, repeated 4-grams and a hash of the supervised ids, and whether the mask
supervises only assistant answers. Rows are never visited one by one in Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dflash_trainer.data.audit.histogram import IntHistogram
from dflash_trainer.data.audit.lists import (
    Runs,
    first_position,
    first_run_start,
    longest_run,
    run_sums,
)
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
from dflash_trainer.data.audit.ngrams import NgramStats
from dflash_trainer.data.audit.text_keys import distinct_counts, most_repeated
from dflash_trainer.data.audit.thresholds import Thresholds
from dflash_trainer.data.audit.token_chunks import TokenChunks, token_chunks
from dflash_trainer.data.audit.token_scan import check_mask, scan_tokens
from dflash_trainer.data.audit.vocab import VocabInfo

COUNTERS = (
    "samples", "tokens", "supervised", "stub", "no_anchor", "truncated", "truncation_known",
    "thinking_missing", "empty_thinking", "near_empty_thinking", "drift_checked", "drift",
    "loop_measured", "loop", "mask_checked", "mask_error", "answer_truncated",
)  # fmt: skip
LOSS_MASK_PLOT = "loss_mask_sum"
SEQ_LEN_PLOT = "seq_len"
THINKING_TOKENS_PLOT = "thinking_tokens"
# Without the vocabulary's whitespace ids, `<think>\n\n</think>` reads as 1 reasoning token and
# `<think>\nR\n</think>` as R + 2: counts are corrected by the template's two newlines.
TEMPLATE_NEWLINES = 2
MIN_LOOP_NGRAMS = 16
DUPLICATES_SHOWN = 8


@dataclass(frozen=True)
class TokenAuditSettings:
    block_size: int = 16
    max_seq_len: int | None = None
    think_start_id: int | None = None
    think_end_id: int | None = None
    vocab: VocabInfo | None = None

    @property
    def needs_input_ids(self) -> bool:
        return True  # repetition, duplicates and the mask check all read the ids


def _reasoning_tokens(
    chunks: TokenChunks,
    start: np.ndarray,
    end: np.ndarray,
    opens: np.ndarray,
    vocab: VocabInfo | None,
) -> tuple[np.ndarray, bool]:
    """Reasoning tokens between each row's thinking start and `</think>` (0: none), and
    whether whitespace was told apart (`VocabInfo.trimmed_reasoning`)."""
    has_end = end >= 0
    lo = np.where(has_end, start + opens, 0)
    hi = np.where(has_end, end, 0)
    if vocab is None or not vocab.knows_whitespace:
        return np.maximum(hi - lo, 0), False
    return vocab.trimmed_spans(chunks.take_row_ids, chunks.size, lo, hi), True


def _supervised_loops(ngrams: NgramStats, loop_share: float) -> tuple[np.ndarray, np.ndarray]:
    """(measured, loop) per row, from the 4-grams of each row's supervised tokens."""
    measured = ngrams.ngrams >= MIN_LOOP_NGRAMS
    loop = measured & (ngrams.repeats > loop_share * np.maximum(ngrams.ngrams, 1))
    return measured, loop


def _mask_errors(
    chunks: TokenChunks,
    runs: Runs,
    first_one: np.ndarray,
    vocab: VocabInfo | None,
    turn: np.ndarray,
    turn_supervised: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(checked, error) per row: supervision outside assistant answers.

    With the assistant header known (`<|im_start|>assistant\n`): every supervised run must start
    after a complete assistant header, with no turn start between them, and no turn-start token
    may be supervised. Without it: only a row whose first token is supervised is an error.
    """
    offsets = chunks.offsets
    checked = chunks.lengths > 0
    # A row's first token is supervised when its first run starts there (-1: no run).
    error = checked & (first_one == offsets[:-1])
    header = vocab.assistant_header if vocab is not None else ()
    size = chunks.size
    if not header or size == 0:
        return checked, error
    if len(turn):
        error[np.searchsorted(offsets, turn[turn_supervised], side="right") - 1] = True
    if len(runs.starts) == 0:
        return checked, error
    if len(turn) == 0:  # no header anywhere: every supervised run is an error
        error[runs.rows] = True
        return checked, error
    is_header = np.ones(len(turn), dtype=bool)
    for k, token in enumerate(header[1:], start=1):
        at = np.minimum(turn + k, size - 1)
        is_header &= (chunks.take_ids(at) == token) & (turn + k < size)
    # The last turn start at or before each run (the first one where there is none: then
    # `last` is -1 and the run is an error whatever it reads).
    last = np.searchsorted(turn, runs.starts, side="right") - 1
    at = np.maximum(last, 0)
    before = turn[at]
    ok = (last >= 0) & (before >= offsets[runs.rows]) & is_header[at]
    ok &= runs.starts >= before + len(header)
    error[runs.rows[~ok]] = True
    return checked, error


def token_features(
    batch: pa.RecordBatch, settings: TokenAuditSettings, thresholds: Thresholds
) -> dict[str, np.ndarray]:
    """Per-row features of one batch (each array has one entry per row)."""
    names = batch.schema.names
    with_ids = "input_ids" in names
    ids_column = batch.column("input_ids") if with_ids else None
    chunks = token_chunks(batch.column("loss_mask"), ids_column)
    check_mask(chunks)
    rows = chunks.rows
    vocab = settings.vocab
    think_end = settings.think_end_id if vocab is None else vocab.think_end
    think_start = settings.think_start_id if vocab is None else vocab.think_start
    header = vocab.assistant_header if vocab is not None else ()
    wanted = [t for t in (think_end, header[0] if header else None) if t is not None]
    scan = scan_tokens(chunks, wanted if with_ids else [])
    runs = scan.runs
    sums = run_sums(runs, rows)
    feats: dict[str, np.ndarray] = {
        "mask_sum": sums,
        "seq_len": chunks.lengths,
        "stub": sums < thresholds.stub_tokens,
        "no_anchor": longest_run(runs, rows) < settings.block_size + 1,
    }
    if "truncated" in names:
        col = batch.column("truncated")
        feats["truncation_known"] = np.ones(rows, dtype=bool)
        feats["truncated"] = col.fill_null(False).to_numpy(zero_copy_only=False)
    elif settings.max_seq_len:
        feats["truncation_known"] = np.ones(rows, dtype=bool)
        feats["truncated"] = chunks.lengths >= settings.max_seq_len
    if "retokenize_drift" in names:
        col = batch.column("retokenize_drift")
        feats["drift_checked"] = col.is_valid().to_numpy(zero_copy_only=False)
        feats["drift"] = col.fill_null(False).to_numpy(zero_copy_only=False)
    if "answer_truncated" in names:
        feats["answer_truncated"] = (
            batch.column("answer_truncated").fill_null(False).to_numpy(zero_copy_only=False)
        )
    if scan.ngrams is None:
        return feats
    start = first_run_start(runs, rows)
    if think_end is not None:
        hits = scan.found[think_end]
        end = first_position(hits[scan.supervised[think_end]], chunks.offsets, rows)
        opens = np.zeros(rows, dtype=np.int64)
        if think_start is not None:  # a row without supervision has no start to read
            opens[:] = (start >= 0) & (chunks.take_row_ids(start) == think_start)
        has_end = end >= 0
        thinking, exact = _reasoning_tokens(chunks, start, end, opens, vocab)
        if not exact:  # the template's newlines are in the count: correct for them
            thinking = np.maximum(thinking - TEMPLATE_NEWLINES, 0)
        feats["thinking_tokens"] = thinking
        feats["has_thinking_end"] = has_end
        feats["thinking_missing"] = ~has_end & (sums > 0)
        feats["empty_thinking"] = has_end & (thinking == 0)
        feats["near_empty_thinking"] = (
            has_end & (thinking > 0) & (thinking < thresholds.min_thinking_tokens)
        )
    measured, loop = _supervised_loops(scan.ngrams, thresholds.loop_ngram_share)
    feats["loop_measured"], feats["loop"] = measured, loop
    feats["span_key"] = scan.ngrams.fingerprints
    no_turns = np.zeros(0, dtype=np.int64)
    turn = scan.found[header[0]] if header else no_turns
    turn_supervised = scan.supervised[header[0]] if header else no_turns.astype(bool)
    feats["mask_checked"], feats["mask_error"] = _mask_errors(
        chunks, runs, start, vocab, turn, turn_supervised
    )
    return feats


class TokensAccumulator:
    """Streams batches into per-source counters, histograms and supervised-span keys."""

    def __init__(self, settings: TokenAuditSettings, thresholds: Thresholds) -> None:
        self.settings = settings
        self.thresholds = thresholds
        self.sources = SourceIndex()
        self.counters = Counters(COUNTERS)
        self.mask_hist: dict[str, IntHistogram] = {}
        self.len_hist: dict[str, IntHistogram] = {}
        self.thinking_hist: dict[str, IntHistogram] = {}
        self.keys: dict[str, list[np.ndarray]] = {}

    def columns(self) -> list[str]:
        cols = ["source", "loss_mask", "truncated", "retokenize_drift", "answer_truncated"]
        return [*cols, "input_ids"] if self.settings.needs_input_ids else cols

    @property
    def knows_thinking(self) -> bool:
        vocab = self.settings.vocab
        return (vocab.think_end if vocab is not None else self.settings.think_end_id) is not None

    def add(self, batch: pa.RecordBatch) -> None:
        rows = batch.num_rows
        if rows == 0:
            return
        src_col = batch.column("source") if "source" in batch.schema.names else None
        src = self.sources.encode(src_col, rows)
        names = self.sources.names
        n = len(names)
        feats = token_features(batch, self.settings, self.thresholds)
        c = self.counters
        c.add("samples", src, None, n)
        c.add("tokens", src, feats["seq_len"].astype(np.float64), n)
        c.add("supervised", src, feats["mask_sum"].astype(np.float64), n)
        for name in COUNTERS[3:]:
            if name in feats:
                c.add(name, src, feats[name].astype(np.float64), n)
        add_histograms(self.mask_hist, feats["mask_sum"], src, names)
        add_histograms(self.len_hist, feats["seq_len"], src, names)
        if "thinking_tokens" in feats:
            # Reasoning lengths of the rows that reason: empty thinking has its own check.
            ended = feats["has_thinking_end"] & ~feats["empty_thinking"]
            add_histograms(self.thinking_hist, feats["thinking_tokens"][ended], src[ended], names)
        if "span_key" in feats:
            for i in np.unique(src):
                self.keys.setdefault(names[int(i)], []).append(feats["span_key"][src == i])

    def _group(
        self,
        get: dict[str, float],
        mask_hist: IntHistogram,
        len_hist: IntHistogram,
        thinking: IntHistogram | None,
        keys: np.ndarray | None,
    ) -> GroupMetrics:
        t = self.thresholds
        samples = int(get["samples"])
        n = float(samples)
        mode, mode_count = mask_hist.mode()
        counts: dict[str, tuple[float, float]] = {
            "loss_mask_mode_share": (float(mode_count), n),
            "stub_rate": (get["stub"], n),
            "no_anchor_rate": (get["no_anchor"], n),
        }
        floor_counts, floor_values = length_floors("completion_tokens", mask_hist, t)
        counts |= floor_counts
        if get["truncation_known"]:
            counts["seq_truncation_rate"] = (get["truncated"], get["truncation_known"])
        if self.knows_thinking and t.expect_thinking:
            counts["thinking_missing_rate"] = (get["thinking_missing"], n)
            counts["empty_thinking_rate"] = (get["empty_thinking"], n)
            counts["near_empty_thinking_rate"] = (get["near_empty_thinking"], n)
            if thinking is not None and thinking.total:
                thinking_counts, thinking_values = length_floors("thinking_tokens", thinking, t)
                counts |= thinking_counts
                floor_values |= thinking_values
        if get["drift_checked"]:
            counts["drift_rate"] = (get["drift"], get["drift_checked"])
        if get["loop_measured"]:
            counts["repetition_rate"] = (get["loop"], get["loop_measured"])
        if get["mask_checked"]:
            counts["mask_error_rate"] = (get["mask_error"], get["mask_checked"])
        distinct, duplicates = None, 0
        if keys is not None:  # one sort gives the count and the most repeated keys
            distinct = distinct_counts(keys)
            duplicates = len(keys) - len(distinct[0])  # rows whose key an earlier row has
            counts["duplicate_completion_rate"] = (float(duplicates), n)
        values = {"samples": n} | {k: ratio(ev, tr) for k, (ev, tr) in counts.items()}
        values |= floor_values  # the floors' values are the percentiles, not the shares
        values["supervised_fraction"] = ratio(get["supervised"], get["tokens"])
        values["supervised_tokens"] = get["supervised"]
        details: dict[str, Any] = {
            "tokens": int(get["tokens"]),
            "supervisedTokens": int(get["supervised"]),
            "lossMaskSum": mask_hist.summary(),
            "lossMaskMode": {"value": mode, "count": mode_count},
            "seqLen": len_hist.summary(),
            "driftChecked": int(get["drift_checked"]),
            "unterminatedAnswers": int(get["answer_truncated"]),
            "repetition": {"measured": int(get["loop_measured"]), "loops": int(get["loop"])},
        }
        if thinking is not None:
            details["thinkingTokens"] = thinking.summary()
        if distinct is not None:
            dup_keys, dup_counts = most_repeated(*distinct, DUPLICATES_SHOWN)
            details["duplicates"] = {
                "exact": duplicates,
                "mostRepeated": [
                    {"key": f"{int(k):016x}", "rows": int(c)}
                    for k, c in zip(dup_keys, dup_counts, strict=True)
                ],
            }
        return GroupMetrics(samples=samples, values=values, details=details, counts=counts)

    def finish(self) -> GateMetrics:
        c = self.counters
        sources = {}
        for i, name in enumerate(self.sources.names):
            get = {k: c.get(k, i) for k in COUNTERS}
            keys = np.concatenate(self.keys[name]) if name in self.keys else None
            sources[name] = self._group(
                get, self.mask_hist[name], self.len_hist[name], self.thinking_hist.get(name), keys
            )
        mask_all = overall_histogram(self.mask_hist)
        len_all = overall_histogram(self.len_hist)
        thinking_all = overall_histogram(self.thinking_hist) if self.thinking_hist else None
        overall = self._group(
            {k: c.total(k) for k in COUNTERS}, mask_all, len_all, thinking_all, None
        )
        if self.keys:  # duplicates are counted within each source; overall is their sum
            dups = sum(g.details["duplicates"]["exact"] for g in sources.values())
            overall.counts["duplicate_completion_rate"] = (float(dups), float(overall.samples))
            overall.values["duplicate_completion_rate"] = ratio(dups, overall.samples)
            overall.details["duplicates"] = {"exact": dups, "mostRepeated": []}
        self.mask_hist[OVERALL] = mask_all
        self.len_hist[OVERALL] = len_all
        histograms = {LOSS_MASK_PLOT: self.mask_hist, SEQ_LEN_PLOT: self.len_hist}
        if thinking_all is not None:
            self.thinking_hist[OVERALL] = thinking_all
            histograms[THINKING_TOKENS_PLOT] = self.thinking_hist
        return GateMetrics("tokens", overall, sources, histograms, self._notes())

    def _notes(self) -> list[str]:
        notes = []
        vocab = self.settings.vocab
        if not self.knows_thinking and self.thresholds.expect_thinking:
            notes.append(
                "thinking checks skipped: the `</think>` token id is unknown "
                "(pass --model, or audit a tokenized/ folder with its _SUCCESS.json)"
            )
        elif self.knows_thinking and (vocab is None or not vocab.knows_whitespace):
            notes.append(
                f"whitespace token ids unknown: reasoning tokens are the tokens between the tags "
                f"minus the template's {TEMPLATE_NEWLINES} newlines"
            )
        if vocab is None or not vocab.assistant_header:
            notes.append(
                "assistant header ids unknown: the mask check only finds rows whose first token "
                "is supervised (pass --model for the full check)"
            )
        return notes
