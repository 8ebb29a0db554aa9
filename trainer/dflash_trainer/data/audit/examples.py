"""Decoded examples for each failing check, like the incident's one-sample diagnostic.

A short second pass over the data (only when a gate fails) that stops as soon as every failing
check has its examples: at least one from every source the check names (up to 8), five in all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dflash_trainer.data.audit.checks import Violation
from dflash_trainer.data.audit.completion_features import (
    CompletionSettings,
    completion_features,
    whole_completion_texts,
)
from dflash_trainer.data.audit.histogram import TEXT_KEY_CHARS
from dflash_trainer.data.audit.metrics import GateMetrics, GroupMetrics, SourceIndex
from dflash_trainer.data.audit.metrics_completions import TOP_TEXT_CHARS
from dflash_trainer.data.audit.metrics_tokens import TokenAuditSettings, token_features
from dflash_trainer.data.audit.thresholds import Thresholds

EXAMPLES_PER_CHECK = 5
MAX_SOURCES_WITH_EXAMPLES = 8
PROMPT_TAIL_CHARS = 300
TEXT_HEAD_CHARS = 600
TEXT_TAIL_CHARS = 300
Decoder = Callable[[list[int]], str]
ANY_SOURCE = ""

# Which per-row feature shows each check's problem (both gates name their features alike).
ROW_PREDICATES = {
    "stub_rate": "stub",
    "no_anchor_rate": "no_anchor",
    "empty_thinking_rate": "empty_thinking",
    "near_empty_thinking_rate": "near_empty_thinking",
    "thinking_missing_rate": "thinking_missing",
    "seq_truncation_rate": "truncated",
    "drift_rate": "drift",
    "mask_error_rate": "mask_error",
    "repetition_rate": "loop",
    "empty_response_rate": "empty_response",
    "truncation_rate": "truncated",
    "stray_think_rate": "stray_think",
    "wrong_language_rate": "wrong_language",
}
# Quantile floors: rows below the floor, on this length feature.
LENGTH_FLOORS = {
    "completion_tokens_p10": ("min_completion_tokens_p10", "length"),
    "completion_tokens_p50": ("min_completion_tokens_p50", "length"),
    "thinking_tokens_p10": ("min_thinking_tokens_p10", "thinking_tokens"),
    "thinking_tokens_p50": ("min_thinking_tokens_p50", "thinking_tokens"),
}
SPECIAL = ("loss_mask_mode_share", "top_response_share", "supervised_fraction",
           "silent_truncation_rate", "duplicate_completion_rate")  # fmt: skip


def _tail(text: str, chars: int) -> str:
    return text if len(text) <= chars else "..." + text[-chars:]


def _head(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + "..."


def build_token_example(row: dict[str, Any], decode: Decoder | None) -> dict[str, Any]:
    ids = row["input_ids"] or []
    mask = row["loss_mask"] or []
    supervised = [t for t, m in zip(ids, mask, strict=False) if m]
    first = next((i for i, m in enumerate(mask) if m), len(ids))
    out: dict[str, Any] = {
        "id": row.get("id"),
        "source": row.get("source"),
        "seqLen": len(ids),
        "lossMaskSum": len(supervised),
    }
    if decode is None:
        out["supervisedIds"] = supervised[:64]
    else:
        out["promptTail"] = _tail(decode(ids[:first]), PROMPT_TAIL_CHARS)
        out["supervised"] = _head(decode(supervised), TEXT_HEAD_CHARS)
        if len(supervised) > 2 * TEXT_HEAD_CHARS // 4:
            out["supervisedTail"] = _tail(decode(supervised[-TEXT_TAIL_CHARS:]), TEXT_TAIL_CHARS)
    return out


def build_completion_example(row: dict[str, Any]) -> dict[str, Any]:
    prompt = row.get("prompt") or ""
    response = row.get("response") or ""
    out = {
        "id": row.get("id"),
        "source": row.get("source"),
        "finishReason": row.get("finish_reason"),
        "outputTokens": row.get("num_output_tokens"),
        "promptTail": _tail(prompt, PROMPT_TAIL_CHARS),
        "reasoning": None
        if row.get("reasoning") is None
        else _head(row["reasoning"], PROMPT_TAIL_CHARS),
        "response": _head(response, TEXT_HEAD_CHARS),
    }
    if len(response) > TEXT_HEAD_CHARS:
        out["responseTail"] = _tail(response, TEXT_TAIL_CHARS)
    return out


class ExampleCollector:
    """Collects examples for the failing checks of one gate in a second pass."""

    def __init__(
        self,
        metrics: GateMetrics,
        violations: list[Violation],
        thresholds: Thresholds,
        settings: TokenAuditSettings | None = None,
        decode: Decoder | None = None,
        completion_settings: CompletionSettings | None = None,
    ) -> None:
        self.gate = metrics.gate
        self.metrics = metrics
        self.thresholds = thresholds
        self.settings = settings or TokenAuditSettings()
        self.completion_settings = completion_settings or CompletionSettings()
        self.decode = decode
        self.sources = SourceIndex()
        # check -> source -> examples still wanted (ANY_SOURCE: the check failed overall only)
        self.quota: dict[str, dict[str, int]] = {}
        for v in violations:
            if (
                v.check not in ROW_PREDICATES
                and v.check not in LENGTH_FLOORS
                and v.check not in SPECIAL
            ):
                continue
            named = v.sources[:MAX_SOURCES_WITH_EXAMPLES] or [ANY_SOURCE]
            base, extra = divmod(EXAMPLES_PER_CHECK, len(named))
            self.quota[v.check] = {
                name: max(1, base + (1 if i < extra else 0)) for i, name in enumerate(named)
            }
        self.examples: dict[str, list[dict[str, Any]]] = {c: [] for c in self.quota}

    @property
    def wanted(self) -> dict[str, dict[str, int]]:
        return self.quota

    def _group(self, source: str) -> GroupMetrics:
        return self.metrics.sources.get(source) or self.metrics.overall

    @property
    def done(self) -> bool:
        return all(n <= 0 for per in self.quota.values() for n in per.values())

    def columns(self) -> list[str]:
        if self.gate == "tokens":
            return ["id", "source", "input_ids", "loss_mask", "truncated", "retokenize_drift",
                    "answer_truncated"]  # fmt: skip
        return ["id", "source", "prompt", "response", "reasoning", "finish_reason",
                "num_output_tokens", "output_token_ids"]  # fmt: skip

    def _hits(
        self, check: str, source: str, feats: dict[str, np.ndarray], batch: pa.RecordBatch
    ) -> np.ndarray | None:
        """Rows of the batch that show `check` failing in `source`."""
        if check in ROW_PREDICATES:
            return feats.get(ROW_PREDICATES[check])
        if check in LENGTH_FLOORS:
            field, feature = LENGTH_FLOORS[check]
            name = "mask_sum" if (feature == "length" and self.gate == "tokens") else feature
            name = "output_tokens" if name == "length" else name
            values = feats.get(name)
            if values is None:
                return None
            floor = getattr(self.thresholds, field)
            hits: np.ndarray = values < floor
            if feature == "thinking_tokens":
                hits &= ~feats.get("empty_thinking", np.zeros(len(hits), dtype=bool))
                if "has_thinking_end" in feats:
                    hits &= feats["has_thinking_end"]
            return hits
        return self._group_hits(check, self._group(source).details, feats, batch)

    def _group_hits(
        self,
        check: str,
        details: dict[str, Any],
        feats: dict[str, np.ndarray],
        batch: pa.RecordBatch,
    ) -> np.ndarray | None:
        """Rows showing a check whose culprit is a per-source value (a mode, a top text...)."""
        hits: np.ndarray | None = None
        if check == "loss_mask_mode_share":
            hits = feats["mask_sum"] == int(details.get("lossMaskMode", {}).get("value", -1))
        elif check == "supervised_fraction":
            frac = feats["mask_sum"] / np.maximum(feats["seq_len"], 1)
            hits = frac < self.thresholds.min_supervised_fraction
        elif check == "top_response_share":
            # The report keeps the first TOP_TEXT_CHARS of the top completion: match its start.
            text = str(details.get("topResponse", {}).get("text", ""))
            key = pc.utf8_slice_codeunits(whole_completion_texts(batch), 0, TEXT_KEY_CHARS)
            same = pc.equal(key, text) if len(text) < TOP_TEXT_CHARS else pc.starts_with(key, text)
            hits = same.to_numpy(zero_copy_only=False).astype(bool)
        elif check == "silent_truncation_rate":
            spikes = details.get("truncation", {}).get("topSpikeLengths", [])
            at_limit = feats.get("at_limit", np.zeros(batch.num_rows, dtype=bool))
            at_spike = np.isin(feats["output_tokens"], np.asarray(spikes, dtype=np.int64))
            hits = at_limit | (at_spike & feats["known_tokens"] & ~feats["truncated"])
        elif check == "duplicate_completion_rate":
            repeated = details.get("duplicates", {}).get("mostRepeated", [])
            keys = np.array([int(r["key"], 16) for r in repeated], dtype=np.uint64)
            key_name = "near_key" if "near_key" in feats else "span_key"
            hits = np.isin(feats[key_name], keys) if len(keys) else None
        return hits

    def add(self, batch: pa.RecordBatch) -> None:
        if self.done or batch.num_rows == 0:
            return
        if self.gate == "tokens":
            feats = token_features(batch, self.settings, self.thresholds)
        else:
            feats = completion_features(batch, self.thresholds, self.completion_settings)
        src_col = batch.column("source") if "source" in batch.schema.names else None
        src = self.sources.encode(src_col, batch.num_rows)
        names = np.array(self.sources.names, dtype=object)[src]
        for check, per_source in self.quota.items():
            for source, room in per_source.items():
                if room <= 0:
                    continue
                hits = self._hits(check, source, feats, batch)
                if hits is None:
                    continue
                if source != ANY_SOURCE:
                    hits = hits & (names == source)
                for i in np.flatnonzero(hits)[:room]:
                    row = batch.slice(int(i), 1).to_pylist()[0]
                    example = (
                        build_token_example(row, self.decode)
                        if self.gate == "tokens"
                        else build_completion_example(row)
                    )
                    self.examples[check].append(example)
                    per_source[source] -= 1

    def collect(self, batches: Iterable[pa.RecordBatch]) -> dict[str, list[dict[str, Any]]]:
        for batch in batches:
            self.add(batch)
            if self.done:
                break
        return self.examples
