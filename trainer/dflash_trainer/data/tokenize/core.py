"""Tokenize a batch of completion rows into Arrow columns (contract section 4).

A row the engine generated is tokenized from what the engine produced: the generation prompt
(rendered by `data.chat_template`, exactly as regeneration rendered it) and the engine's own
`output_token_ids`, never re-tokenized and never given an end of turn it did not generate.
Rows without ids (imported completions) are rendered with the chat template and split into
prompt/answer by `data.loss_mask`. Every text of a batch is encoded in one `encode_batch` call.

Cut answers (finish_reason `length`, or no finish_reason at the generation limit) follow the
policy `truncated_answers`: `drop` (default) or `keep` them unterminated; both are counted per
source.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from dflash_trainer.data.chat_template import ChatTemplate
from dflash_trainer.data.loss_mask import (
    Segment,
    TemplateMismatchError,
    build_segments,
    build_unterminated,
)

MAX_MISMATCH_EXAMPLES = 5
FINISH_LENGTH = "length"
# vLLM's repetition detection cut a looping answer: also an answer without its end of turn.
FINISH_REPETITION = "repetition"
TRUNCATED_POLICIES = ("drop", "keep")
TOKENIZED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("input_ids", pa.list_(pa.int32())),
        pa.field("loss_mask", pa.list_(pa.int8())),
        pa.field("seq_len", pa.int32()),
        pa.field("truncated", pa.bool_()),
        pa.field("retokenize_drift", pa.bool_()),
        # The answer was cut by the generation limit and kept unterminated (policy keep).
        pa.field("answer_truncated", pa.bool_()),
    ]
)


@dataclass(frozen=True)
class TokenizeSettings:
    max_seq_len: int
    end_of_turn: str
    enable_thinking: bool = True
    supervise: str = "last"
    truncated_answers: str = "drop"
    # The generation limit: a row without finish_reason that reached it was probably cut.
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.truncated_answers not in TRUNCATED_POLICIES:
            raise ValueError(
                f"truncated_answers={self.truncated_answers!r}; accepted: "
                + ", ".join(TRUNCATED_POLICIES)
            )


@dataclass
class TokenizeCounts:
    samples: int = 0
    tokens: int = 0
    supervised_tokens: int = 0
    truncated: int = 0
    drift_checked: int = 0
    drift: int = 0
    from_engine_ids: int = 0
    mismatches: Counter[str] = field(default_factory=Counter)
    mismatch_examples: list[str] = field(default_factory=list)
    # source -> {"dropped", "kept", "probable"}: answers cut by the generation limit.
    cut_answers: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, other: TokenizeCounts) -> None:
        for name in ("samples", "tokens", "supervised_tokens", "truncated", "drift_checked",
                     "drift", "from_engine_ids"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.mismatches.update(other.mismatches)
        room = MAX_MISMATCH_EXAMPLES - len(self.mismatch_examples)
        self.mismatch_examples.extend(other.mismatch_examples[: max(room, 0)])
        for source, counts in other.cut_answers.items():
            self.cut_answers[source].update(counts)

    @property
    def mismatched(self) -> int:
        return sum(self.mismatches.values())


def build_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompt messages of a completion row plus its answer as the final assistant turn."""
    answer: dict[str, Any] = {"role": "assistant", "content": row.get("response") or ""}
    if row.get("reasoning") is not None:
        answer["reasoning_content"] = row["reasoning"]
    return [*build_prompt(row), answer]


def build_prompt(row: dict[str, Any]) -> list[dict[str, Any]]:
    prompt = row["prompt"]
    return json.loads(prompt) if isinstance(prompt, str) else list(prompt)


def cut_kind(row: dict[str, Any], max_new_tokens: int | None) -> str | None:
    """ "reported" when the engine said the answer was cut, "probable" when a row without a
    finish_reason reached the generation limit, None otherwise."""
    finish = row.get("finish_reason")
    if finish in (FINISH_LENGTH, FINISH_REPETITION):
        return "reported"
    count = row.get("num_output_tokens")
    if not finish and max_new_tokens and isinstance(count, int) and count >= max_new_tokens:
        return "probable"
    return None


@dataclass(frozen=True)
class Piece:
    """One part of a row's sequence: text to encode, or ids the engine produced."""

    supervised: bool
    text: str = ""
    ids: list[int] | None = None


@dataclass(frozen=True)
class RowPlan:
    row: dict[str, Any]
    pieces: list[Piece]
    cut: bool
    engine_ids: bool


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

    def plan_row(self, row: dict[str, Any], cut: bool) -> RowPlan:
        """The pieces of one row; raises TemplateMismatchError when no correct mask exists."""
        engine = row.get("output_token_ids")
        if engine is not None and len(engine) and self.settings.supervise == "last":
            prompt = self.template.render(
                build_prompt(row),
                add_generation_prompt=True,
                enable_thinking=self.settings.enable_thinking,
            )
            ids = [int(i) for i in engine]
            return RowPlan(row, [Piece(False, prompt), Piece(True, ids=ids)], cut, True)
        segs = self.segments(row)
        if cut:  # the template closed the turn; the engine did not
            last = segs[-1]
            text = build_unterminated(
                last.text, self.settings.end_of_turn, row.get("response") or ""
            )
            segs = [*segs[:-1], Segment(text, last.supervised)]
        return RowPlan(row, [Piece(s.supervised, s.text) for s in segs], cut, False)

    def tokenize(self, rows: list[dict[str, Any]]) -> tuple[pa.Table, TokenizeCounts]:
        counts = TokenizeCounts()
        plans: list[RowPlan] = []
        for row in rows:
            kind = cut_kind(row, self.settings.max_new_tokens)
            source = str(row.get("source"))
            if kind is not None:
                if kind == "probable":
                    counts.cut_answers[source]["probable"] += 1
                if self.settings.truncated_answers == "drop":
                    counts.cut_answers[source]["dropped"] += 1
                    continue
                counts.cut_answers[source]["kept"] += 1
            try:
                plans.append(self.plan_row(row, kind is not None))
            except TemplateMismatchError as exc:
                counts.mismatches[exc.kind] += 1
                if len(counts.mismatch_examples) < MAX_MISMATCH_EXAMPLES:
                    counts.mismatch_examples.append(f"{row.get('id')} ({row.get('source')}): {exc}")
        texts = [p.text for plan in plans for p in plan.pieces if p.ids is None]
        encodings = iter(self._encode(texts, add_special_tokens=False) if texts else [])
        piece_ids = [
            p.ids if p.ids is not None else next(encodings).ids
            for plan in plans
            for p in plan.pieces
        ]
        counts.from_engine_ids = sum(plan.engine_ids for plan in plans)
        return self._assemble(plans, piece_ids, counts), counts

    def _assemble(
        self, plans: list[RowPlan], piece_ids: list[list[int]], counts: TokenizeCounts
    ) -> pa.Table:
        """Concatenate each row's pieces, mask them, cut at maxSeqLen: whole-batch numpy."""
        seg_len = np.fromiter(map(len, piece_ids), dtype=np.int64, count=len(piece_ids))
        seg_sup = np.fromiter(
            (p.supervised for plan in plans for p in plan.pieces),
            dtype=np.int8,
            count=len(piece_ids),
        )
        seg_count = np.fromiter(
            (len(plan.pieces) for plan in plans), dtype=np.int64, count=len(plans)
        )
        total = int(seg_len.sum())
        flat_ids = np.fromiter(chain.from_iterable(piece_ids), dtype=np.int32, count=total)
        flat_mask = np.repeat(seg_sup, seg_len)
        first_seg = (np.cumsum(seg_count) - seg_count).astype(np.int64)
        full_len = np.add.reduceat(seg_len, first_seg) if len(plans) else seg_len[:0]
        # Truncate every row at maxSeqLen at once: keep the positions < max_seq_len of each row.
        max_len = self.settings.max_seq_len
        cut = full_len > max_len
        if cut.any():
            row_start = np.repeat(np.cumsum(full_len) - full_len, full_len)
            keep = np.arange(total) - row_start < max_len
            flat_ids, flat_mask = flat_ids[keep], flat_mask[keep]
        seq_len = np.minimum(full_len, max_len)
        offsets = np.zeros(len(plans) + 1, dtype=np.int32)
        np.cumsum(seq_len, out=offsets[1:])
        drift = self._drift(plans, piece_ids, first_seg, seg_count, counts)
        counts.samples = len(plans)
        counts.truncated += int(cut.sum())
        counts.tokens += int(seq_len.sum())
        counts.supervised_tokens += int(flat_mask.sum(dtype=np.int64))
        offs = pa.array(offsets)
        return pa.table(
            {
                "id": pa.array([p.row.get("id") for p in plans], pa.string()),
                "source": pa.array([p.row.get("source") for p in plans], pa.string()),
                "input_ids": pa.ListArray.from_arrays(offs, pa.array(flat_ids)),
                "loss_mask": pa.ListArray.from_arrays(offs, pa.array(flat_mask)),
                "seq_len": pa.array(seq_len.astype(np.int32), pa.int32()),
                "truncated": pa.array(cut, pa.bool_()),
                "retokenize_drift": pa.array(drift, pa.bool_()),
                "answer_truncated": pa.array([p.cut for p in plans], pa.bool_()),
            },
            schema=TOKENIZED_SCHEMA,
        )

    def _drift(
        self,
        plans: list[RowPlan],
        piece_ids: list[list[int]],
        first_seg: np.ndarray,
        seg_count: np.ndarray,
        counts: TokenizeCounts,
    ) -> list[bool | None]:
        """Per row with engine ids: does our tokenizer re-encode the engine's text to other ids?

        A high rate means the tokenizer differs from the one the engine used (another revision
        or model). Training uses the engine's ids either way; None: no engine ids.
        """
        out: list[bool | None] = [None] * len(plans)
        checked = [i for i, plan in enumerate(plans) if plan.engine_ids]
        if not checked:
            return out
        engine = [piece_ids[int(first_seg[i] + seg_count[i] - 1)] for i in checked]
        texts = self.backend.decode_batch(engine, skip_special_tokens=False)
        again = self._encode(texts, add_special_tokens=False)
        for i, ids, enc in zip(checked, engine, again, strict=True):
            drifted = list(enc.ids) != list(ids)
            out[i] = drifted
            counts.drift += int(drifted)
        counts.drift_checked += len(checked)
        return out
