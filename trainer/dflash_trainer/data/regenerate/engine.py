"""The one interface both generation engines implement, and what they return.

Engines receive prompts as token ids (rendered by `data.chat_template`, the same renderer the
tokenize stage uses) and return the generated ids, the decoded text and why generation stopped.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

from dflash_trainer.data.formats import THINK_START, split_thinking

FINISH_STOP = "stop"
FINISH_LENGTH = "length"
# vLLM's other finish reasons (vllm.v1.engine.FinishReason). `repetition`: its repetition
# detection cut a looping answer (an answer cut short, like `length`); `abort` and `error`: the
# request failed, and the shard fails with it (retried by its Job) instead of keeping a row.
FINISH_REPETITION = "repetition"
FINISH_ABORT = "abort"
FINISH_ERROR = "error"
# Reasons of an answer that did not reach its end of turn (tokenization's truncation policy).
CUT_REASONS = frozenset({FINISH_LENGTH, FINISH_REPETITION})
FAILED_REASONS = frozenset({FINISH_ABORT, FINISH_ERROR})
KNOWN_REASONS = frozenset({FINISH_STOP}) | CUT_REASONS | FAILED_REASONS


@dataclass(frozen=True)
class SamplingSpec:
    """Sampling parameters from `spec.regeneration` (Qwen3 thinking-mode defaults)."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    min_p: float = 0.0
    max_tokens: int = 4096
    seed: int = 0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0


@dataclass(frozen=True)
class Generation:
    token_ids: list[int]  # everything generated, including the end-of-turn token if emitted
    text: str  # decoded without special tokens (so without the end-of-turn token)
    finish_reason: str  # the engine's own reason: "stop" (end of turn), "length", "repetition"


class Engine(Protocol):
    name: str

    def generate(self, prompts: list[list[int]], request_ids: list[str]) -> list[Generation]:
        """One Generation per prompt, in order. `request_ids` seed per-request sampling."""
        ...


def request_seed(seed: int, request_id: str) -> int:
    """A per-request sampling seed: the same sample gets the same answer however it is batched."""
    digest = hashlib.sha256(f"{seed}:{request_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def is_prompt_opening_think(prompt_text: str) -> bool:
    """Qwen3.5/3.6 templates end the generation prompt inside an open think block."""
    tail = prompt_text.rstrip()
    return tail.endswith(THINK_START)


def split_generation(
    text: str, enable_thinking: bool, prompt_opens_think: bool
) -> tuple[str | None, str]:
    """(reasoning, response) of a generated text. With thinking off there is no reasoning;
    an unterminated think block (cut by max_tokens) is all reasoning and no response."""
    if not enable_thinking:
        return None, text
    reasoning, response = split_thinking(THINK_START + text if prompt_opens_think else text)
    return reasoning, response
