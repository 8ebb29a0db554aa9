"""Tokenize a batch of completion rows into Arrow columns (contract section 4).

Each row is rendered with the target's chat template, split into prompt/answer segments by
`data.loss_mask`, and every segment of the batch is encoded in one parallel `encode_batch` call.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
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
        """Concatenate each row's segments, mask them, cut at maxSeqLen: whole-batch numpy."""
        seg_ids = [e.ids for e in encodings]
        seg_len = np.fromiter(map(len, seg_ids), dtype=np.int64, count=len(seg_ids))
        seg_sup = np.fromiter(
            (s.supervised for _, segs in kept for s in segs), dtype=np.int8, count=len(seg_ids)
        )
        seg_count = np.fromiter((len(segs) for _, segs in kept), dtype=np.int64, count=len(kept))
        first_seg = (np.cumsum(seg_count) - seg_count).astype(np.int64)
        total = int(seg_len.sum())
        flat_ids = np.fromiter(chain.from_iterable(seg_ids), dtype=np.int32, count=total)
        flat_mask = np.repeat(seg_sup, seg_len)
        full_len = np.add.reduceat(seg_len, first_seg) if len(kept) else seg_len[:0]
        # Truncate every row at maxSeqLen at once: keep the positions < max_seq_len of each row.
        max_len = self.settings.max_seq_len
        cut = full_len > max_len
        if cut.any():
            row_start = np.repeat(np.cumsum(full_len) - full_len, full_len)
            keep = np.arange(total) - row_start < max_len
            flat_ids, flat_mask = flat_ids[keep], flat_mask[keep]
        seq_len = np.minimum(full_len, max_len)
        offsets = np.zeros(len(kept) + 1, dtype=np.int32)
        np.cumsum(seq_len, out=offsets[1:])
        drift = self._drift(kept, seg_ids, first_seg, seg_count, counts)
        counts.samples = len(kept)
        counts.truncated += int(cut.sum())
        counts.tokens += int(seq_len.sum())
        counts.supervised_tokens += int(flat_mask.sum(dtype=np.int64))
        offs = pa.array(offsets)
        return pa.table(
            {
                "id": pa.array([r.get("id") for r, _ in kept], pa.string()),
                "source": pa.array([r.get("source") for r, _ in kept], pa.string()),
                "input_ids": pa.ListArray.from_arrays(offs, pa.array(flat_ids)),
                "loss_mask": pa.ListArray.from_arrays(offs, pa.array(flat_mask)),
                "seq_len": pa.array(seq_len.astype(np.int32), pa.int32()),
                "truncated": pa.array(cut, pa.bool_()),
                "retokenize_drift": pa.array(drift, pa.bool_()),
            },
            schema=TOKENIZED_SCHEMA,
        )

    def _drift(
        self,
        kept: list[tuple[dict[str, Any], list[Segment]]],
        seg_ids: list[list[int]],
        first_seg: np.ndarray,
        seg_count: np.ndarray,
        counts: TokenizeCounts,
    ) -> list[bool | None]:
        """Per row: did re-tokenizing the answer change the engine's ids (None: no ids)."""
        out: list[bool | None] = []
        rows = zip(kept, first_seg.tolist(), seg_count.tolist(), strict=True)
        for (row, _), first, n in rows:
            engine = row.get("output_token_ids")
            if not engine or self.settings.supervise != "last":
                out.append(None)
                continue
            drifted = is_drifted(seg_ids[first + n - 1], list(engine), self.eot_id)
            counts.drift_checked += 1
            counts.drift += int(drifted)
            out.append(drifted)
        return out
