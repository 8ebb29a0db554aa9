"""The one interface both generation engines implement, and what they return.

Engines stream: the runner adds requests (prompts as token ids, rendered by `data.chat_template`,
the same renderer the tokenize stage uses) and steps the engine, which returns each request as it
finishes: the generated ids, the decoded text and why generation stopped.
"""

from __future__ import annotations

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
    """A streaming engine: requests go in one at a time and come out as they finish."""

    name: str

    def add(self, request_id: str, prompt: list[int]) -> None:
        """Queue one request (the id is the runner's own, unique among unfinished requests)."""
        ...

    def step(self) -> list[tuple[str, Generation]]:
        """Advance the engine; the requests that finished meanwhile, in the order they finished.
        May return nothing (a step that finished no request); never blocks without work."""
        ...

    def close(self) -> None:
        """Stop background work (transformers' batching thread); the engine is not used again."""
        ...


def generate_all(engine: Engine, prompts: list[list[int]]) -> list[Generation]:
    """Every prompt through a streaming engine, answers in prompt order (benchmarks, tests)."""
    for n, prompt in enumerate(prompts):
        engine.add(str(n), prompt)
    answers: dict[str, Generation] = {}
    while len(answers) < len(prompts):
        answers.update(engine.step())
    return [answers[str(n)] for n in range(len(prompts))]


def shard_seed(seed: int, shard: int) -> int:
    """The engine's one sampling seed for a shard. Per-request seeds would force vLLM onto its slow
    sampling path (a per-request generator loop over the vocabulary): docs/data-pipeline.md says
    what reproducibility one seed per shard gives."""
    return seed + shard


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
