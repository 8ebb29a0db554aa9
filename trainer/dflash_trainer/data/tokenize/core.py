"""Tokenize a batch of completion rows into Arrow columns (contract section 4).

Each row is rendered with the target's chat template, split into prompt/answer segments by
`data.loss_mask`, and every segment of the batch is encoded in one parallel `encode_batch` call.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.loss_mask import Segment, TemplateMismatchError, build_segments

MAX_MISMATCH_EXAMPLES = 5
TOKENIZED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("input_ids", pa.list_(pa.int32())),
        pa.field("loss_mask", pa.list_(pa.int8())),
        pa.field("seq_len", pa.int32()),
        pa.field("truncated", pa.bool_()),
        pa.field("retokenize_drift", pa.bool_()),
    ]
)


@dataclass(frozen=True)
class TokenizeSettings:
    max_seq_len: int
    end_of_turn: str
    enable_thinking: bool = True
    supervise: str = "last"


@dataclass
class TokenizeCounts:
    samples: int = 0
    tokens: int = 0
    supervised_tokens: int = 0
    truncated: int = 0
    drift_checked: int = 0
    drift: int = 0
    mismatches: Counter[str] = field(default_factory=Counter)
    mismatch_examples: list[str] = field(default_factory=list)

    def add(self, other: TokenizeCounts) -> None:
        for name in (
            "samples",
            "tokens",
            "supervised_tokens",
            "truncated",
            "drift_checked",
            "drift",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.mismatches.update(other.mismatches)
        room = MAX_MISMATCH_EXAMPLES - len(self.mismatch_examples)
        self.mismatch_examples.extend(other.mismatch_examples[: max(room, 0)])

    @property
    def mismatched(self) -> int:
        return sum(self.mismatches.values())


def build_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompt messages of a completion row plus its answer as the final assistant turn."""
    prompt = row["prompt"]
    messages = json.loads(prompt) if isinstance(prompt, str) else list(prompt)
    answer: dict[str, Any] = {"role": "assistant", "content": row.get("response") or ""}
    if row.get("reasoning") is not None:
        answer["reasoning_content"] = row["reasoning"]
    return [*messages, answer]


def is_drifted(ours: list[int], engine: list[int], eot_id: int) -> bool:
    """Whether re-tokenizing the rendered answer gives other ids than the engine generated.

    An answer cut by max_tokens has no end-of-turn token from the engine; the template adds one.
    """
    if ours and engine and ours[-1] == eot_id and engine[-1] != eot_id:
        ours = ours[:-1]
    return ours != engine


class RowTokenizer:
    """Turns completion rows into tokenized Arrow tables for one target tokenizer."""

    def __init__(self, tokenizer: Any, template: ChatTemplate, settings: TokenizeSettings) -> None:
        self.backend = tokenizer.backend_tokenizer
        self.template = template
        self.settings = settings
        eot = tokenizer.convert_tokens_to_ids(settings.end_of_turn)
        if not isinstance(eot, int) or eot < 0:
            raise ValueError(f"end-of-turn token {settings.end_of_turn!r} is not in the vocabulary")
        self.eot_id = eot
        encode = getattr(self.backend, "encode_batch_fast", None) or self.backend.encode_batch
        self._encode = encode

    def segments(self, row: dict[str, Any]) -> list[Segment]:
        return build_segments(
            self.template,
            build_messages(row),
            self.settings.end_of_turn,
            self.settings.enable_thinking,
            self.settings.supervise,
        )

    def tokenize(self, rows: list[dict[str, Any]]) -> tuple[pa.Table, TokenizeCounts]:
        counts = TokenizeCounts()
        kept: list[tuple[dict[str, Any], list[Segment]]] = []
        for row in rows:
            try:
                kept.append((row, self.segments(row)))
            except TemplateMismatchError as exc:
                counts.mismatches[exc.kind] += 1
                if len(counts.mismatch_examples) < MAX_MISMATCH_EXAMPLES:
                    counts.mismatch_examples.append(f"{row.get('id')} ({row.get('source')}): {exc}")
        texts = [seg.text for _, segs in kept for seg in segs]
        encodings = self._encode(texts, add_special_tokens=False) if texts else []
        return self._assemble(kept, encodings, counts), counts

    def _assemble(
        self,
        kept: list[tuple[dict[str, Any], list[Segment]]],
        encodings: list[Any],
        counts: TokenizeCounts,
    ) -> pa.Table:
        max_len = self.settings.max_seq_len
        flat_ids: list[int] = []
        flat_mask: list[int] = []
        offsets = [0]
        truncated: list[bool] = []
        drift: list[bool | None] = []
        cursor = 0
        for row, segs in kept:
            ids: list[int] = []
            mask: list[int] = []
            last_answer: list[int] = []
            for seg in segs:
                seg_ids = encodings[cursor].ids
                cursor += 1
                ids.extend(seg_ids)
                mask.extend([1 if seg.supervised else 0] * len(seg_ids))
                if seg.supervised:
                    last_answer = seg_ids
            engine = list(row.get("output_token_ids") or [])
            if engine and self.settings.supervise == "last":
                counts.drift_checked += 1
                drifted = is_drifted(last_answer, engine, self.eot_id)
                counts.drift += int(drifted)
                drift.append(drifted)
            else:
                drift.append(None)
            cut = len(ids) > max_len
            if cut:
                ids, mask = ids[:max_len], mask[:max_len]
            truncated.append(cut)
            counts.truncated += int(cut)
            counts.tokens += len(ids)
            counts.supervised_tokens += sum(mask)
            flat_ids.extend(ids)
            flat_mask.extend(mask)
            offsets.append(len(flat_ids))
        counts.samples = len(kept)
        offs = pa.array(np.asarray(offsets, dtype=np.int32))
        return pa.table(
            {
                "id": pa.array([r.get("id") for r, _ in kept], pa.string()),
                "source": pa.array([r.get("source") for r, _ in kept], pa.string()),
                "input_ids": pa.ListArray.from_arrays(
                    offs, pa.array(np.asarray(flat_ids, np.int32))
                ),
                "loss_mask": pa.ListArray.from_arrays(
                    offs, pa.array(np.asarray(flat_mask, np.int8))
                ),
                "seq_len": pa.array(np.diff(np.asarray(offsets, dtype=np.int32)), pa.int32()),
                "truncated": pa.array(truncated, pa.bool_()),
                "retokenize_drift": pa.array(drift, pa.bool_()),
            },
            schema=TOKENIZED_SCHEMA,
        )
