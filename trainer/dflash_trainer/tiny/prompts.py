"""Deterministic tiny prompts and conversations built from the built-in corpus.

Used by tests, the demo's prompt file and the optional format lesson of the tiny target.
"""

from __future__ import annotations

import random
from typing import Any

from dflash_trainer.tiny.corpus import PARAGRAPHS, QUESTION_SHAPES, TOPICS


def build_prompts(count: int, seed: int = 0) -> list[str]:
    """`count` distinct-where-possible user prompts (topic x question shape, then numbered)."""
    rng = random.Random(seed)  # noqa: S311 - deterministic test data, not security
    base = [shape.format(topic=topic) for topic in TOPICS for shape in QUESTION_SHAPES]
    rng.shuffle(base)
    out: list[str] = []
    round_no = 0
    while len(out) < count:
        for prompt in base:
            if len(out) == count:
                break
            out.append(prompt if round_no == 0 else f"{prompt} (variant {round_no})")
        round_no += 1
    return out


def build_conversations(count: int, seed: int = 0) -> list[list[dict[str, Any]]]:
    """Single-turn conversations with a short reasoning trace and an answer from the corpus."""
    rng = random.Random(seed + 1)  # noqa: S311 - deterministic test data, not security
    convs = []
    for prompt in build_prompts(count, seed):
        reasoning = rng.choice(PARAGRAPHS).strip()
        answer = rng.choice(PARAGRAPHS).strip()
        convs.append(
            [
                {"role": "user", "content": prompt},
                {"role": "assistant", "content": answer, "reasoning_content": reasoning},
            ]
        )
    return convs


def build_prompt_records(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """OpenAI-messages JSONL records (`{"messages": [...]}`) for a demo prompt file."""
    return [{"messages": [{"role": "user", "content": p}]} for p in build_prompts(count, seed)]


def tokenized_prompts(tokenizer: Any, count: int, seed: int = 0) -> list[list[int]]:
    """`count` prompt records rendered with the tokenizer's chat template (generation prompt
    on) and tokenized: what the regeneration stage hands its engine."""
    from dflash_trainer.data.chat_template import ChatTemplate

    template = ChatTemplate.from_tokenizer(tokenizer)
    texts = [template.render(r["messages"], True) for r in build_prompt_records(count, seed)]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
