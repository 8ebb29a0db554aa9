"""Prompt ingestion: stream every source, normalize, deduplicate, apply maxSamples and weight.

Produces `PromptRecord`s in a deterministic order plus per-source counts and file:line examples
of every rejected row (the prompts gate and the regenerate stage report them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dflash_trainer.data.formats import normalize_row
from dflash_trainer.data.readers import iter_rows
from dflash_trainer.data.records import (
    PromptRecord,
    SampleError,
    build_dedup_key,
    build_prompt_messages,
    build_sample_id,
)
from dflash_trainer.data.sources import SourceFormat, SourceSpec, Turns

MALFORMED_KINDS = ("malformed_json", "invalid_utf8", "line_too_long", "schema", "content_type")
ISSUE_KINDS = (*MALFORMED_KINDS, "role", "empty_prompt")
MAX_EXAMPLES = 5
# Weight < 1 keeps a sample when the first 32 bits of its id, as a fraction, fall below it.
WEIGHT_HASH_HEX = 8
WEIGHT_HASH_RANGE = float(16**WEIGHT_HASH_HEX)


@dataclass
class SourceStats:
    name: str
    uri: str
    rows: int = 0
    accepted: int = 0
    emitted: int = 0
    duplicates: int = 0
    reached_max_samples: bool = False
    issues: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def malformed(self) -> int:
        return sum(self.issues[k] for k in MALFORMED_KINDS)

    def add_issue(self, where: str, error: SampleError) -> None:
        self.issues[error.kind] += 1
        shown = self.examples.setdefault(error.kind, [])
        if len(shown) < MAX_EXAMPLES:
            shown.append(f"{where}: {error}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "uri": self.uri,
            "rows": self.rows,
            "accepted": self.accepted,
            "emitted": self.emitted,
            "duplicates": self.duplicates,
            "malformed": self.malformed,
            "reachedMaxSamples": self.reached_max_samples,
            "issues": dict(sorted(self.issues.items())),
            "examples": self.examples,
        }


@dataclass
class IngestStats:
    sources: dict[str, SourceStats] = field(default_factory=dict)

    def total(self, attr: str) -> int:
        return sum(int(getattr(s, attr)) for s in self.sources.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.total("rows"),
            "accepted": self.total("accepted"),
            "emitted": self.total("emitted"),
            "duplicates": self.total("duplicates"),
            "malformed": self.total("malformed"),
            "sources": [s.to_dict() for s in self.sources.values()],
        }


def is_kept_by_weight(sample_id: str, fraction: float) -> bool:
    """Stable sub-sampling: the same id is kept or dropped on every machine and every run."""
    return int(sample_id[:WEIGHT_HASH_HEX], 16) / WEIGHT_HASH_RANGE < fraction


def build_copies(record: PromptRecord, weight: float) -> list[PromptRecord]:
    """`weight` copies of a record: the integer part always, the fraction by stable hash."""
    whole = int(weight)
    copies = whole + (1 if is_kept_by_weight(record.id, weight - whole) else 0)
    out = []
    for k in range(copies):
        sample_id = record.id if k == 0 else f"{record.id}-{k}"
        out.append(
            PromptRecord(
                sample_id,
                record.source,
                record.messages,
                record.all_turns,
                record.completion,
                record.dedup_key,
            )
        )
    return out


def iter_source(spec: SourceSpec, stats: SourceStats, seen: set[int]) -> Iterator[PromptRecord]:
    """Normalized, deduplicated records of one source (stops reading at maxSamples)."""
    all_turns = spec.turns is Turns.ALL
    for row in iter_rows(spec.uri):
        stats.rows += 1
        if row.error is not None:
            stats.add_issue(row.where, row.error)
            continue
        try:
            messages, completion = normalize_row(row.value, spec.format)
            prompt = (
                messages
                if spec.format is SourceFormat.REGENERATED
                else build_prompt_messages(messages, all_turns)
            )
        except SampleError as exc:
            stats.add_issue(row.where, exc)
            continue
        key = build_dedup_key(prompt)
        if key in seen:
            stats.duplicates += 1
            continue
        seen.add(key)
        stats.accepted += 1
        record = PromptRecord(
            id=build_sample_id(spec.name, prompt),
            source=spec.name,
            messages=prompt,
            all_turns=all_turns and completion is None,
            completion=completion,
            dedup_key=key,
        )
        for copy in build_copies(record, spec.weight):
            stats.emitted += 1
            yield copy
        if spec.max_samples is not None and stats.accepted >= spec.max_samples:
            stats.reached_max_samples = True
            return


def iter_prompts(sources: list[SourceSpec], stats: IngestStats) -> Iterator[PromptRecord]:
    """All sources in order; a prompt seen in an earlier source is a duplicate in later ones."""
    seen: set[int] = set()
    for spec in sources:
        source_stats = stats.sources.setdefault(spec.name, SourceStats(spec.name, spec.uri))
        yield from iter_source(spec, source_stats, seen)
