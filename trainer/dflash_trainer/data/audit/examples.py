"""Decoded examples for each failing check, like the incident's one-sample diagnostic.

A short second pass over the data (only when a gate fails) that stops as soon as every failing
check has its examples, preferring rows from the sources the check names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dflash_trainer.data.audit.checks import Violation
from dflash_trainer.data.audit.histogram import TEXT_KEY_CHARS
from dflash_trainer.data.audit.metrics import GateMetrics, SourceIndex
from dflash_trainer.data.audit.metrics_completions import completion_features
from dflash_trainer.data.audit.metrics_tokens import TokenAuditSettings, token_features
from dflash_trainer.data.audit.thresholds import Thresholds

EXAMPLES_PER_CHECK = 5
PROMPT_TAIL_CHARS = 300
TEXT_HEAD_CHARS = 600
Decoder = Callable[[list[int]], str]

# Which per-row feature shows each check's problem.
TOKEN_PREDICATES = {
    "stub_rate": "stub",
    "no_anchor_rate": "no_anchor",
    "empty_thinking_rate": "empty_thinking",
    "thinking_missing_rate": "thinking_missing",
    "seq_truncation_rate": "truncated",
    "drift_rate": "drift",
}
COMPLETION_PREDICATES = {
    "empty_response_rate": "empty_response",
    "empty_thinking_rate": "empty_thinking",
    "stub_rate": "stub",
    "truncation_rate": "truncated",
    "stray_think_rate": "stray_think",
}


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
    return out


def build_completion_example(row: dict[str, Any]) -> dict[str, Any]:
    prompt = row.get("prompt") or ""
    return {
        "id": row.get("id"),
        "source": row.get("source"),
        "finishReason": row.get("finish_reason"),
        "outputTokens": row.get("num_output_tokens"),
        "promptTail": _tail(prompt, PROMPT_TAIL_CHARS),
        "reasoning": None
        if row.get("reasoning") is None
        else _head(row["reasoning"], PROMPT_TAIL_CHARS),
        "response": _head(row.get("response") or "", TEXT_HEAD_CHARS),
    }


class ExampleCollector:
    """Collects examples for the failing checks of one gate in a second pass."""

    def __init__(
        self,
        metrics: GateMetrics,
        violations: list[Violation],
        thresholds: Thresholds,
        settings: TokenAuditSettings | None = None,
        decode: Decoder | None = None,
    ) -> None:
        self.gate = metrics.gate
        self.thresholds = thresholds
        self.settings = settings or TokenAuditSettings()
        self.decode = decode
        self.sources = SourceIndex()
        table = TOKEN_PREDICATES if self.gate == "tokens" else COMPLETION_PREDICATES
        self.wanted: dict[str, tuple[str | None, set[str]]] = {}
        for v in violations:
            if v.check in table or v.check in (
                "loss_mask_mode_share",
                "top_response_share",
                "supervised_fraction",
            ):
                self.wanted[v.check] = (table.get(v.check), set(v.sources))
        self.mode_value = self._mode_value(metrics, violations)
        self.top_text = self._top_text(metrics, violations)
        self.examples: dict[str, list[dict[str, Any]]] = {c: [] for c in self.wanted}

    @staticmethod
    def _first_source(violations: list[Violation], check: str) -> str | None:
        return next((v.sources[0] for v in violations if v.check == check and v.sources), None)

    def _mode_value(self, metrics: GateMetrics, violations: list[Violation]) -> int:
        group = metrics.sources.get(self._first_source(violations, "loss_mask_mode_share") or "")
        details = (group or metrics.overall).details
        return int(details.get("lossMaskMode", {}).get("value", -1))

    def _top_text(self, metrics: GateMetrics, violations: list[Violation]) -> str:
        group = metrics.sources.get(self._first_source(violations, "top_response_share") or "")
        return str((group or metrics.overall).details.get("topResponse", {}).get("text", ""))

    @property
    def done(self) -> bool:
        return all(len(v) >= EXAMPLES_PER_CHECK for v in self.examples.values())

    def columns(self) -> list[str]:
        if self.gate == "tokens":
            return ["id", "source", "input_ids", "loss_mask", "truncated", "retokenize_drift"]
        return [
            "id",
            "source",
            "prompt",
            "response",
            "reasoning",
            "finish_reason",
            "num_output_tokens",
        ]

    def _hits(
        self, check: str, feats: dict[str, np.ndarray], batch: pa.RecordBatch
    ) -> np.ndarray | None:
        feature, _ = self.wanted[check]
        hits: np.ndarray | None
        if feature is not None:
            hits = feats.get(feature)
        elif check == "loss_mask_mode_share":
            hits = feats["mask_sum"] == self.mode_value
        elif check == "supervised_fraction":
            frac = feats["mask_sum"] / np.maximum(feats["seq_len"], 1)
            hits = frac < self.thresholds.min_supervised_fraction
        else:
            key = pc.utf8_slice_codeunits(batch.column("response").fill_null(""), 0, TEXT_KEY_CHARS)
            hits = pc.equal(key, self.top_text).to_numpy(zero_copy_only=False)
        return hits

    def add(self, batch: pa.RecordBatch) -> None:
        if self.done or batch.num_rows == 0:
            return
        if self.gate == "tokens":
            feats = token_features(batch, self.settings, self.thresholds)
        else:
            feats = completion_features(batch, self.thresholds)
        src_col = batch.column("source") if "source" in batch.schema.names else None
        src = self.sources.encode(src_col, batch.num_rows)
        names = np.array(self.sources.names, dtype=object)
        for check, (_, sources) in self.wanted.items():
            room = EXAMPLES_PER_CHECK - len(self.examples[check])
            hits = self._hits(check, feats, batch)
            if room <= 0 or hits is None:
                continue
            if sources:
                hits = hits & np.isin(names[src], list(sources))
            for i in np.flatnonzero(hits)[:room]:
                row = batch.slice(int(i), 1).to_pylist()[0]
                example = (
                    build_token_example(row, self.decode)
                    if self.gate == "tokens"
                    else build_completion_example(row)
                )
                self.examples[check].append(example)

    def collect(self, batches: Iterable[pa.RecordBatch]) -> dict[str, list[dict[str, Any]]]:
        for batch in batches:
            self.add(batch)
            if self.done:
                break
        return self.examples
