"""Regenerated-completion sources of broken shapes other than the incident's, and healthy ones
(including the trap: long, distinct reasoning that ends in a common short answer).

Rows look like what the regenerate stage writes (contract section 3): prompt messages as JSON,
reasoning, response, the engine's `output_token_ids` (encoded with a real tokenizer and chat
format), `num_output_tokens` and `finish_reason`. Used by the audit tests, one broken shape per
new check, each next to a healthy source of the same size.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dflash_trainer.data.regenerate.shard_store import COMPLETION_SCHEMA

WORDS = [
    "the",
    "model",
    "reads",
    "each",
    "token",
    "and",
    "predicts",
    "the",
    "next",
    "one",
    "while",
    "the",
    "drafter",
    "proposes",
    "a",
    "block",
    "that",
    "the",
    "target",
    "verifies",
    "in",
    "a",
    "single",
    "pass",
    "so",
    "accepted",
    "tokens",
    "cost",
    "almost",
    "nothing",
    "and",
    "rejected",
    "ones",
    "are",
    "regenerated",
    "from",
    "the",
    "target",
    "distribution",
    "which",
    "keeps",
    "the",
    "output",
    "exact",
    "binary",
    "search",
    "halves",
    "the",
    "range",
    "every",
    "step",
    "until",
    "the",
    "value",
    "is",
    "found",
    "or",
    "the",
    "range",
    "is",
    "empty",
    "sorting",
    "a",
    "list",
    "first",
    "makes",
    "lookups",
    "faster",
    "hash",
    "tables",
    "trade",
    "memory",
    "for",
    "constant",
    "time",
    "access",
    "trees",
    "keep",
    "keys",
    "ordered",
    "and",
    "support",
    "range",
    "queries",
    "queues",
    "serve",
    "requests",
    "in",
    "arrival",
    "order",
    "stacks",
    "reverse",
    "them",
    "recursion",
    "solves",
    "a",
    "problem",
    "through",
    "smaller",
    "copies",
    "of",
    "itself",
    "dynamic",
    "programming",
    "stores",
    "answers",
    "to",
    "subproblems",
    "caching",
    "avoids",
    "repeated",
    "work",
    "weather",
    "rivers",
    "mountains",
    "forests",
    "cities",
    "history",
    "music",
    "painting",
    "chemistry",
    "physics",
    "biology",
    "economics",
    "language",
    "travel",
    "kitchen",
    "garden",
    "winter",
    "summer",
    "ocean",
    "desert",
    "bridge",
    "engine",
    "window",
    "careful",
    "quick",
    "gentle",
    "bright",
    "quiet",
    "heavy",
    "simple",
    "complex",
    "ancient",
    "modern",
    "useful",
    "strange",
]
HAN = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去"
GENERIC_OPENERS = ("Sure, here you go:", "Happy to help:", "Of course:", "Great question:")
TRAP_ANSWERS = ("Yes.", "No.", "42", "7")
GLANCES = ("OK.", "Hmm.", "Sure.", "Yes.", "Fine.")
FINISH_STOP = "stop"


@dataclass(frozen=True)
class ChatFormat:
    """How the target writes a generation after the prompt (Qwen3: it opens `<think>` itself)."""

    think_start: str = "<think>\n"
    think_end: str = "\n</think>\n\n"
    end_of_turn: str = "<|im_end|>"
    thinking: bool = True

    def generated(self, reasoning: str | None, response: str, finished: bool = True) -> str:
        head = "" if reasoning is None else f"{self.think_start}{reasoning}{self.think_end}"
        return head + response + (self.end_of_turn if finished else "")


Encoder = Callable[[str], list[int]]


class ShapeBuilder:
    """Builds rows of one source at a time with a fixed seed; `encode` is the target's."""

    def __init__(self, encode: Encoder, seed: int = 0, fmt: ChatFormat | None = None) -> None:
        self.encode = encode
        self.rng = np.random.default_rng(seed)
        self.fmt = fmt or ChatFormat()
        self.count = 0

    def words(self, low: int, high: int) -> str:
        n = int(self.rng.integers(low, high + 1))
        return " ".join(self.rng.choice(WORDS, n)).capitalize() + "."

    def han(self, low: int, high: int) -> str:
        n = int(self.rng.integers(low, high + 1))
        return "".join(self.rng.choice(list(HAN), n)) + "。"

    def row(
        self,
        source: str,
        reasoning: str | None,
        response: str,
        finish: str | None = FINISH_STOP,
        max_tokens: int | None = None,
        prompt: str | None = None,
    ) -> dict[str, Any]:
        """One completion; with `max_tokens`, cut to exactly that many ids (text decoded from
        the cut is approximated by dropping the answer and the tags, as an engine would)."""
        self.count += 1
        text = prompt or f"Question {self.count}: " + self.words(8, 16)
        ids = self.encode(self.fmt.generated(reasoning, response))
        if max_tokens is not None:
            ids = ids[:max_tokens]
            response = ""
        return {
            "id": f"{source}-{self.count:06d}",
            "source": source,
            "prompt": json.dumps([{"role": "user", "content": text}], ensure_ascii=False),
            "response": response,
            "reasoning": reasoning,
            "output_token_ids": ids,
            "num_output_tokens": len(ids),
            "finish_reason": finish,
            "turn": 0,
        }

    # --- healthy ---------------------------------------------------------------------------
    def healthy(self, source: str, n: int) -> list[dict[str, Any]]:
        return [self.row(source, self.words(30, 80), self.words(20, 60)) for _ in range(n)]

    def trap(self, source: str, n: int) -> list[dict[str, Any]]:
        """Long, distinct reasoning ending in a common short answer: healthy, never flagged."""
        answers = self.rng.choice(TRAP_ANSWERS, n)
        return [self.row(source, self.words(40, 100), str(a)) for a in answers]

    # --- broken ----------------------------------------------------------------------------
    def generic_short(self, source: str, n: int) -> list[dict[str, Any]]:
        """Distinct but generic short answers after a glance of reasoning."""
        openers = self.rng.choice(GENERIC_OPENERS, n)
        return [self.row(source, self.words(3, 5), f"{o} {self.words(2, 4)}") for o in openers]

    def near_empty_thinking(self, source: str, n: int) -> list[dict[str, Any]]:
        """A token or two of reasoning: a template or system prompt that all but skips it."""
        glances = self.rng.choice(GLANCES, n)
        return [self.row(source, str(g), self.words(30, 80)) for g in glances]

    def silent_truncation(
        self, source: str, n: int, max_tokens: int, share: float, finish: str | None
    ) -> list[dict[str, Any]]:
        """`share` of the answers run past the limit and are cut at it, not reported as cut."""
        rows = []
        for _ in range(n):
            if self.rng.random() < share:
                rows.append(
                    self.row(source, self.words(400, 500), self.words(40, 60), finish, max_tokens)
                )
            else:
                rows.append(self.row(source, self.words(30, 80), self.words(20, 60), finish))
        return rows

    def duplicates(self, source: str, n: int, share: float) -> list[dict[str, Any]]:
        """Half the duplicates exact, half differing only in case and whitespace."""
        rows = self.healthy(source, n)
        copies = int(share * n)
        for k in range(copies):
            original = rows[k]
            reasoning, response = original["reasoning"], original["response"]
            if k % 2:
                reasoning, response = reasoning.upper(), "  " + response.replace(" ", "\n ")
            rows[n - 1 - k] = self.row(source, reasoning, response)
        return rows

    def loops(self, source: str, n: int, share: float) -> list[dict[str, Any]]:
        """Reasoning stuck repeating one sentence, that still ends with a stop token."""
        rows = []
        for _ in range(n):
            if self.rng.random() < share:
                stuck = self.words(6, 10)
                rows.append(self.row(source, " ".join([stuck] * 20), self.words(10, 20)))
            else:
                rows.append(self.row(source, self.words(30, 80), self.words(20, 60)))
        return rows

    def wrong_language(self, source: str, n: int, share: float) -> list[dict[str, Any]]:
        """English prompts answered in Chinese."""
        rows = []
        for _ in range(n):
            answer = self.han(30, 60) if self.rng.random() < share else self.words(20, 60)
            rows.append(self.row(source, self.words(30, 80), answer))
        return rows


def build_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=COMPLETION_SCHEMA)
