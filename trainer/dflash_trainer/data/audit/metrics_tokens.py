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
    FlatList,
    Runs,
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
    length_floors,
    overall_histogram,
    ratio,
)
from dflash_trainer.data.audit.ngrams import ngram_stats
from dflash_trainer.data.audit.text_keys import count_duplicates, duplicated_keys
from dflash_trainer.data.audit.thresholds import Thresholds
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
    ids: FlatList, start: np.ndarray, end: np.ndarray, opens: np.ndarray, vocab: VocabInfo | None
) -> tuple[np.ndarray, bool]:
    """Reasoning tokens between each row's thinking start and `</think>` (0: none), and
    whether whitespace was told apart (`VocabInfo.trimmed_reasoning`)."""
    has_end = end >= 0
    lo = np.where(has_end, start + opens, 0)
    hi = np.where(has_end, end, 0)
    if vocab is None or not vocab.knows_whitespace:
        return np.maximum(hi - lo, 0), False
    return vocab.trimmed_reasoning(ids.values, lo, hi), True


def _supervised_loops(
    ids: FlatList, mask: FlatList, runs: Runs, loop_share: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(measured, loop, fingerprint) per row, over each row's supervised tokens."""
    stats = ngram_stats(ids.values, ids.offsets, mask.values, (runs.starts, runs.ends, runs.rows))
    measured = stats.ngrams >= MIN_LOOP_NGRAMS
    loop = measured & (stats.repeats > loop_share * np.maximum(stats.ngrams, 1))
    return measured, loop, stats.fingerprints


def find_tokens(values: np.ndarray, wanted: list[int]) -> dict[int, np.ndarray]:
    """Flat positions of each wanted id, in one pass over the ids: control tokens (turn
    starts, think tags) sit above the text vocabulary in the tokenizers we target, so the
    candidates above the smallest wanted id are few, and each id is picked from those."""
    floor = min(wanted)
    candidates = np.flatnonzero(values >= floor)
    found = values[candidates]
    return {token: candidates[found == token] for token in wanted}


def _mask_errors(
    ids: FlatList,
    mask: FlatList,
    runs: Runs,
    rows: int,
    vocab: VocabInfo | None,
    turn: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """(checked, error) per row: supervision outside assistant answers.

    With the assistant header known (`<|im_start|>assistant\n`): every supervised run must start
    after a complete assistant header, with no turn start between them, and no turn-start token
    may be supervised. Without it: only a row whose first token is supervised is an error.
    """
    checked = mask.lengths > 0
    first_supervised = mask.values[mask.offsets[:-1][checked]] == 1
    error = np.zeros(rows, dtype=bool)
    error[checked] = first_supervised
    header = vocab.assistant_header if vocab is not None else ()
    if not header or len(ids.values) == 0:
        return checked, error
    if turn is None:
        turn = np.flatnonzero(ids.values == header[0])
    if len(turn):
        supervised_turn = turn[mask.values[turn] == 1]
        error[np.unique(np.searchsorted(ids.offsets, supervised_turn, side="right") - 1)] = True
    if len(runs.starts) == 0:
        return checked, error
    is_header = np.ones(len(turn), dtype=bool)
    for k, token in enumerate(header[1:], start=1):
        at = np.minimum(turn + k, len(ids.values) - 1)
        is_header &= (ids.values[at] == token) & (turn + k < len(ids.values))
    last = np.searchsorted(turn, runs.starts, side="right") - 1
    row_start = ids.offsets[runs.rows]
    ok = last >= 0
    ok[ok] &= turn[last[ok]] >= row_start[ok]
    ok[ok] &= is_header[last[ok]] & (runs.starts[ok] >= turn[last[ok]] + len(header))
    bad_rows = runs.rows[~ok]
    error[bad_rows] = True
    return checked, error


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
    if "answer_truncated" in names:
        feats["answer_truncated"] = (
            batch.column("answer_truncated").fill_null(False).to_numpy(zero_copy_only=False)
        )
    if "input_ids" not in names:
        return feats
    ids = flatten_list(batch.column("input_ids"), np.int32)
    if len(ids.values) and int(ids.values.min()) < 0:
        raise ValueError("input_ids must be token ids >= 0 (found a negative id)")
    vocab = settings.vocab
    think_end = settings.think_end_id if vocab is None else vocab.think_end
    think_start = settings.think_start_id if vocab is None else vocab.think_start
    header = vocab.assistant_header if vocab is not None else ()
    wanted = [t for t in (think_end, header[0] if header else None) if t is not None]
    positions = find_tokens(ids.values, wanted) if wanted else {}
    if think_end is not None:
        hits = positions[think_end]
        end = first_position(hits[mask.values[hits] == 1], ids.offsets, rows)
        start = first_run_start(runs, rows)
        opens = np.zeros(rows, dtype=np.int64)
        if think_start is not None:
            valid = start >= 0
            opens[valid] = ids.values[start[valid]] == think_start
        has_end = end >= 0
        thinking, exact = _reasoning_tokens(ids, start, end, opens, vocab)
        if not exact:  # the template's newlines are in the count: correct for them
            thinking = np.maximum(thinking - TEMPLATE_NEWLINES, 0)
        feats["thinking_tokens"] = thinking
        feats["has_thinking_end"] = has_end
        feats["thinking_missing"] = ~has_end & (sums > 0)
        feats["empty_thinking"] = has_end & (thinking == 0)
        feats["near_empty_thinking"] = (
            has_end & (thinking > 0) & (thinking < thresholds.min_thinking_tokens)
        )
    measured, loop, keys = _supervised_loops(ids, mask, runs, thresholds.loop_ngram_share)
    feats["loop_measured"], feats["loop"], feats["span_key"] = measured, loop, keys
    turn = positions.get(header[0]) if header else None
    feats["mask_checked"], feats["mask_error"] = _mask_errors(ids, mask, runs, rows, vocab, turn)
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
        duplicates = count_duplicates(keys) if keys is not None else None
        if duplicates is not None:
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
        if keys is not None:
            dup_keys, dup_counts = duplicated_keys(keys, DUPLICATES_SHOWN)
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
