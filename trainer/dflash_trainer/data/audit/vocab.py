"""What the gates need to know about the target's vocabulary: the think tags, the end of turn,
which ids are only whitespace (so `<think>\\n\\n</think>` counts as 0 reasoning tokens), and the
ids that open an assistant turn (loss-mask sanity).

Built from a tokenizer (`--model`) or read from the tokenize stage's `_SUCCESS.json`, which
records it so that the tokens gate needs no tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dflash_trainer.data.errors import BadInputError

THINK_START = "<think>"
THINK_END = "</think>"
# Decoding the whole vocabulary one id at a time is fast in the Rust tokenizer (~0.3 s for
# Qwen3.6's 248K ids, measured), but a corrupt config could claim billions: refuse that.
MAX_VOCAB = 4_000_000
# Whitespace tokens stripped at each edge of a think block (the template's newlines, and "\n\n"
# as one or two tokens).
EDGE_WHITESPACE = 3


@dataclass(frozen=True)
class VocabInfo:
    think_start: int | None = None
    think_end: int | None = None
    end_of_turn: int | None = None
    # Sorted ids whose text is whitespace only ("\n", "\n\n", "  ", ...).
    whitespace_ids: tuple[int, ...] = ()
    # The ids that open an assistant turn, e.g. `<|im_start|>assistant\n`; the first one is the
    # turn-start id every turn begins with.
    assistant_header: tuple[int, ...] = ()
    vocab_size: int = 0
    _table: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def turn_start(self) -> int | None:
        return self.assistant_header[0] if self.assistant_header else None

    @property
    def knows_whitespace(self) -> bool:
        return bool(self.whitespace_ids)

    def trimmed_reasoning(self, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Tokens in each span [lo, hi) of `ids` without the whitespace-only tokens at its
        edges (at most EDGE_WHITESPACE each side): `<think>\n\n</think>` holds 0, `<think>\nOK.
        \n</think>` 1. Only the edges are read (a few ids a row, not every token): whitespace
        inside long reasoning is formatting and does not decide whether it is near-empty."""
        return self.trimmed_spans(lambda at: ids[at], len(ids), lo, hi)

    def trimmed_spans(
        self, take: Callable[[np.ndarray], np.ndarray], size: int, lo: np.ndarray, hi: np.ndarray
    ) -> np.ndarray:
        """`trimmed_reasoning` of ids that `take` reads at flat positions in [0, size), given
        as one row of positions per edge: ids kept as chunks are read in one call. Only the
        edges inside their span count, so `take` may read anything for the others."""
        span: np.ndarray = np.maximum(hi - lo, 0)
        if not self.whitespace_ids or size == 0:
            return span
        steps = np.arange(EDGE_WHITESPACE)[:, None]
        # The first and the last EDGE_WHITESPACE positions of each span, one row each.
        at = np.clip(np.concatenate([lo + steps, hi - 1 - steps]), 0, size - 1)
        edges = self.is_whitespace(take(at))
        lead = _leading(edges[:EDGE_WHITESPACE], steps < span)
        trail = _leading(edges[EDGE_WHITESPACE:], steps < span - lead)
        trimmed: np.ndarray = np.maximum(span - lead - trail, 0)
        return trimmed

    def is_whitespace(self, ids: np.ndarray) -> np.ndarray:
        """Whether each id is whitespace-only, from a bool table over the ids (at least up to
        max(ids)), built once."""
        largest = max(self.whitespace_ids) if self.whitespace_ids else 0
        size = max(int(ids.max()) + 1 if ids.size else 1, self.vocab_size, largest + 1)
        table = self._table.get("whitespace")
        if table is None or len(table) < size:
            table = np.zeros(size, dtype=bool)
            if self.whitespace_ids:
                table[np.asarray(self.whitespace_ids, dtype=np.int64)] = True
            self._table["whitespace"] = table
        found: np.ndarray = table[ids]
        return found

    def to_manifest(self) -> dict[str, Any]:
        return {
            "thinkStartId": self.think_start,
            "thinkEndId": self.think_end,
            "endOfTurnId": self.end_of_turn,
            "whitespaceIds": list(self.whitespace_ids),
            "assistantHeaderIds": list(self.assistant_header),
            "vocabSize": self.vocab_size,
        }

    @classmethod
    def from_manifest(cls, info: dict[str, Any]) -> VocabInfo:
        def opt_int(key: str) -> int | None:
            value = info.get(key)
            return int(value) if isinstance(value, int) else None

        def int_list(key: str) -> tuple[int, ...]:
            value = info.get(key)
            if not isinstance(value, list):
                return ()
            return tuple(int(v) for v in value if isinstance(v, int))

        return cls(
            think_start=opt_int("thinkStartId"),
            think_end=opt_int("thinkEndId"),
            end_of_turn=opt_int("endOfTurnId"),
            whitespace_ids=tuple(sorted(int_list("whitespaceIds"))),
            assistant_header=int_list("assistantHeaderIds"),
            vocab_size=opt_int("vocabSize") or 0,
        )

    @classmethod
    def from_tokenizer(
        cls, tokenizer: Any, template: Any = None, enable_thinking: bool = True
    ) -> VocabInfo:
        """Everything from a transformers tokenizer; `template` (a ChatTemplate) gives the
        assistant header, without it the header is left unknown."""
        size = len(tokenizer)
        if size > MAX_VOCAB:
            raise BadInputError(
                f"--model: the tokenizer has {size:,} ids; at most {MAX_VOCAB:,} are supported"
            )
        backend = tokenizer.backend_tokenizer
        texts = backend.decode_batch([[i] for i in range(size)], skip_special_tokens=False)
        whitespace = tuple(i for i, t in enumerate(texts) if t and not t.strip())
        eos = tokenizer.eos_token
        return cls(
            think_start=_single_id(tokenizer, THINK_START),
            think_end=_single_id(tokenizer, THINK_END),
            end_of_turn=_single_id(tokenizer, eos) if eos else None,
            whitespace_ids=whitespace,
            assistant_header=_assistant_header(tokenizer, template, enable_thinking),
            vocab_size=size,
        )


def _leading(edges: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """Per column, how many of the first rows of `edges` are whitespace inside the span, in a
    row: an edge token is trimmed while every one before it was (a loop of whole-row ands:
    numpy's reductions along the first axis are ~8x slower here, measured)."""
    alive: np.ndarray = edges[0] & inside[0]
    count: np.ndarray = alive.astype(np.int64)
    for k in range(1, len(edges)):
        alive &= edges[k] & inside[k]
        count += alive
    return count


def _single_id(tokenizer: Any, token: str) -> int | None:
    ids = tokenizer.encode(token, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else None


PROBE = [{"role": "user", "content": "x"}]


def _assistant_header(tokenizer: Any, template: Any, enable_thinking: bool) -> tuple[int, ...]:
    """The ids the generation prompt adds after a user turn, up to any think pre-fill."""
    if template is None:
        return ()
    try:
        turn = template.render(PROBE, add_generation_prompt=False, enable_thinking=enable_thinking)
        prompt = template.render(PROBE, add_generation_prompt=True, enable_thinking=enable_thinking)
    except Exception:
        return ()
    if not prompt.startswith(turn) or len(prompt) == len(turn):
        return ()
    header = prompt[len(turn) :].split(THINK_START, 1)[0]
    ids = tokenizer.encode(header, add_special_tokens=False)
    specials = set(getattr(tokenizer, "all_special_ids", []))
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    specials |= {int(i) for i, token in added.items() if getattr(token, "special", False)}
    # Only a header that starts with a special turn-start token can be told from prompt text.
    return tuple(int(i) for i in ids) if ids and ids[0] in specials else ()
