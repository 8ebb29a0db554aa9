"""What the gates need to know about the target's vocabulary: the think tags, the end of turn,
which ids are only whitespace (so `<think>\\n\\n</think>` counts as 0 reasoning tokens), and the
ids that open an assistant turn (loss-mask sanity).

Built from a tokenizer (`--model`) or read from the tokenize stage's `_SUCCESS.json`, which
records it so that the tokens gate needs no tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

THINK_START = "<think>"
THINK_END = "</think>"
# Decoding the whole vocabulary one id at a time is fast in the Rust tokenizer (~0.3 s for
# Qwen3.6's 248K ids, measured), but a corrupt config could claim billions: refuse that.
MAX_VOCAB = 4_000_000


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

    def reasoning_token_table(self, size: int) -> np.ndarray:
        """uint8 table over ids: 1 for an id that is reasoning text (not whitespace, not a tag)."""
        size = max(size, self.vocab_size, 1)
        cached = self._table.get("reasoning")
        if cached is not None and len(cached) >= size:
            return cached
        table = np.ones(size, dtype=np.uint8)
        if self.whitespace_ids:
            table[np.asarray(self.whitespace_ids, dtype=np.int64)] = 0
        for tag in (self.think_start, self.think_end):
            if tag is not None and tag < size:
                table[tag] = 0
        self._table["reasoning"] = table
        return table

    def whitespace_table(self, ids: np.ndarray) -> np.ndarray:
        """bool table over ids (at least up to max(ids)): True for whitespace-only ids."""
        size = max(int(ids.max()) + 1 if len(ids) else 1, self.vocab_size, 1)
        cached = self._table.get("whitespace")
        if cached is not None and len(cached) >= size:
            return cached
        table = np.zeros(size, dtype=bool)
        if self.whitespace_ids:
            table[np.asarray(self.whitespace_ids, dtype=np.int64)] = True
        self._table["whitespace"] = table
        return table

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
            raise ValueError(f"the tokenizer claims {size} ids; at most {MAX_VOCAB} are supported")
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
