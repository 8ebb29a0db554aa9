"""Prompts gate metrics: ingestion counts per source (malformed, roles, empty, duplicates) and,
given the target, prompts too long for the engine's context.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from dflash_trainer.data.audit.metrics import GateMetrics, GroupMetrics, ratio
from dflash_trainer.data.ingest import IngestStats
from dflash_trainer.data.records import PromptRecord


def count_overlong(
    records: Iterator[PromptRecord],
    prompt_lengths: Any,
    limit: int,
    batch: int = 512,
) -> Counter[str]:
    """Per-source count of prompts whose token length exceeds `limit` (lengths in batches)."""
    counts: Counter[str] = Counter()
    chunk: list[PromptRecord] = []
    for record in records:
        chunk.append(record)
        if len(chunk) == batch:
            _count_chunk(chunk, prompt_lengths, limit, counts)
            chunk = []
    if chunk:
        _count_chunk(chunk, prompt_lengths, limit, counts)
    return counts


def _count_chunk(
    chunk: list[PromptRecord], prompt_lengths: Any, limit: int, counts: Counter[str]
) -> None:
    for record, length in zip(chunk, prompt_lengths([r.messages for r in chunk]), strict=True):
        if length > limit:
            counts[record.source] += 1


def build_prompt_metrics(stats: IngestStats, overlong: Counter[str] | None) -> GateMetrics:
    """GateMetrics of the prompts gate from ingestion counts."""
    groups: dict[str, GroupMetrics] = {}
    for name, s in stats.sources.items():
        values = {
            "samples": float(s.accepted),
            "malformed_rate": ratio(s.malformed, s.rows),
            "role_error_rate": ratio(s.issues["role"], s.rows),
            "empty_prompt_rate": ratio(s.issues["empty_prompt"], s.rows),
            "duplicate_rate": ratio(s.duplicates, s.rows),
            "source_samples": float(s.accepted),
        }
        if overlong is not None:
            values["overlong_prompt_rate"] = ratio(overlong[name], s.accepted)
        groups[name] = GroupMetrics(samples=s.rows, values=values, details=s.to_dict())
    rows = stats.total("rows")
    accepted = stats.total("accepted")
    overall_values = {
        "samples": float(accepted),
        "malformed_rate": ratio(stats.total("malformed"), rows),
        "role_error_rate": ratio(sum(s.issues["role"] for s in stats.sources.values()), rows),
        "empty_prompt_rate": ratio(
            sum(s.issues["empty_prompt"] for s in stats.sources.values()), rows
        ),
        "duplicate_rate": ratio(stats.total("duplicates"), rows),
        "source_samples": min((float(s.accepted) for s in stats.sources.values()), default=0.0),
    }
    if overlong is not None:
        overall_values["overlong_prompt_rate"] = ratio(sum(overlong.values()), accepted)
    overall = GroupMetrics(samples=rows, values=overall_values, details=stats.to_dict())
    notes = [] if overlong is not None else [
        "overlong_prompt_rate skipped: pass --model and --max-model-len to measure prompt lengths"
    ]  # fmt: skip
    return GateMetrics("prompts", overall, groups, {}, notes)
