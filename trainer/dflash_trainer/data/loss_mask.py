"""Which characters of a chat-templated conversation are supervised (loss_mask = 1).

The mask comes from character offsets: the text the template renders as the generation prompt
versus the text of the conversation with the answer. Only the generated part is supervised:
thinking, answer and the end-of-turn token; never the prompt or the assistant header.

Qwen3.5/3.6 pre-fill a think block in the generation prompt (`<think>\n`, or
`<think>\n\n</think>\n\n` with thinking off) but render a finished turn with empty reasoning
without it. The sequence the model really saw is the prompt followed by what it generated: the
answer (thinking off), or the template's own closing `\n</think>\n\n` and the answer (empty
thinking). Any other disagreement (earlier turns rewritten, reasoning dropped) raises
`TemplateMismatchError` instead of producing a wrong mask.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dflash_trainer.data.chat_template import ChatTemplate

EXCERPT_CHARS = 60
THINK_START = "<think>"
THINK_END = "</think>"
# A think block pre-filled at the end of a generation prompt: open, or closed and empty.
PREFILLED_THINK = re.compile(r"<think>\s*(?:</think>\s*)?$")
CLOSING_THINK = re.compile(r"\s*</think>\s*")
TRAILING_CLOSED_THINK = re.compile(r"\s*</think>\s*$")


class TemplateMismatchError(Exception):
    """The chat template makes a correct mask impossible for this conversation."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Segment:
    text: str
    supervised: bool


def _excerpt(text: str, at: int) -> str:
    return repr(text[max(0, at - EXCERPT_CHARS // 2) : at + EXCERPT_CHARS // 2])


def _divergence(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    i = 0
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def _turn_span(
    template: ChatTemplate,
    messages: list[dict[str, Any]],
    k: int,
    enable_thinking: bool,
    end_of_turn: str,
) -> tuple[str, int, int]:
    """Render the conversation ending at assistant turn k: (text, answer start, answer end)."""
    prompt = template.render(
        messages[:k], add_generation_prompt=True, enable_thinking=enable_thinking
    )
    full = template.render(
        messages[: k + 1], add_generation_prompt=False, enable_thinking=enable_thinking
    )
    if full.startswith(prompt):
        end = full.find(end_of_turn, len(prompt))
        if end < 0:
            raise TemplateMismatchError(
                "missing_end_of_turn", f"turn {k}: no {end_of_turn!r} after the answer"
            )
        end += len(end_of_turn)
    else:
        full, end = _splice_prefilled_think(template, messages, k, prompt, full, end_of_turn)
    generated = full[len(prompt) : end]
    message = messages[k]
    answer = str(message.get("content") or "").strip()
    if answer and answer not in generated:
        raise TemplateMismatchError(
            "dropped_answer", f"turn {k}: the template dropped the answer text"
        )
    reasoning = str(message.get("reasoning_content") or "").strip()
    if reasoning and reasoning not in generated:
        raise TemplateMismatchError(
            "dropped_reasoning",
            f"turn {k}: the template dropped the reasoning of the answer (thinking off for a "
            "reasoning sample, or a template that strips the think block)",
        )
    return full, len(prompt), end


def _splice_prefilled_think(
    template: ChatTemplate,
    messages: list[dict[str, Any]],
    k: int,
    prompt: str,
    full: str,
    end_of_turn: str,
) -> tuple[str, int]:
    """(prompt + generated text, end of the answer) when the only disagreement between the
    generation prompt and the finished turn is a pre-filled think block (module docstring)."""
    prefill = PREFILLED_THINK.search(prompt)
    head = prompt[: prefill.start()] if prefill else ""
    if prefill is None or not full.startswith(head):
        at = _divergence(prompt, full)
        raise TemplateMismatchError(
            "prompt_not_prefix",
            f"turn {k}: the chat template renders the answered conversation differently from its "
            f"own generation prompt (prompt has {_excerpt(prompt, at)}, conversation has "
            f"{_excerpt(full, at)}); the mask cannot be computed without guessing",
        )
    rest = full[len(head) :]
    eot = rest.find(end_of_turn)
    if eot < 0:
        raise TemplateMismatchError(
            "missing_end_of_turn", f"turn {k}: no {end_of_turn!r} after the answer"
        )
    answer = rest[: eot + len(end_of_turn)]
    if THINK_START in answer or THINK_END in answer:
        raise TemplateMismatchError(
            "reasoning_after_closed_think",
            f"turn {k}: the generation prompt pre-fills a think block ({_excerpt(prefill.group(), 0)}) "
            "yet the answer carries reasoning: the data was generated with other thinking "
            "settings than the tokenizer's (check target.thinking)",
        )
    if THINK_END in prefill.group():  # thinking off: the model wrote the answer after it
        generated = answer
    else:  # empty reasoning: the model closed the block the way the template closes it
        closed = template.render(messages[:k], add_generation_prompt=True, enable_thinking=False)
        closing = closed[len(prompt) :] if closed.startswith(prompt) else ""
        if not CLOSING_THINK.fullmatch(closing):
            raise TemplateMismatchError(
                "prompt_not_prefix",
                f"turn {k}: the generation prompt opens a think block the finished turn does not "
                "render, and the template's thinking-off prompt does not show how it closes",
            )
        generated = closing + answer
    return prompt + generated, len(prompt) + len(generated)


def build_unterminated(generated: str, end_of_turn: str, answer: str) -> str:
    """A cut answer as the engine left it: no end-of-turn, and no think block closed by the
    template when the cut came inside the reasoning (there is no answer text)."""
    text = generated.removesuffix(end_of_turn)
    if not answer.strip():
        closed = TRAILING_CLOSED_THINK.search(text)
        if closed is not None:
            text = text[: closed.start()]
    return text


def build_segments(
    template: ChatTemplate,
    messages: list[dict[str, Any]],
    end_of_turn: str,
    enable_thinking: bool = True,
    supervise: str = "last",
) -> list[Segment]:
    """Prompt / answer segments of a conversation that ends with an assistant turn.

    supervise="last": only the final assistant turn (the row's regenerated answer).
    supervise="all": every assistant turn in one sequence; requires a template that renders
    earlier turns exactly as it did when each was the last one (Qwen thinking templates do not).
    """
    if not messages or messages[-1].get("role") != "assistant":
        raise ValueError("build_segments needs a conversation that ends with an assistant turn")
    if supervise == "last":
        full, start, end = _turn_span(
            template, messages, len(messages) - 1, enable_thinking, end_of_turn
        )
        return [Segment(full[:start], False), Segment(full[start:end], True)]
    if supervise != "all":
        raise ValueError(f"supervise={supervise!r}; accepted: last, all")
    full = template.render(messages, add_generation_prompt=False, enable_thinking=enable_thinking)
    segments: list[Segment] = []
    cursor = 0
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        text, start, end = _turn_span(template, messages, k, enable_thinking, end_of_turn)
        if not full.startswith(text[:end]):
            at = _divergence(text[:end], full)
            raise TemplateMismatchError(
                "rewrites_earlier_turns",
                f"turn {k}: the chat template re-renders this assistant turn once later turns "
                f"follow ({_excerpt(text, at)} becomes {_excerpt(full, at)}), so one sequence "
                "cannot supervise every turn correctly; use --supervise last",
            )
        segments.append(Segment(full[cursor:start], False))
        segments.append(Segment(full[start:end], True))
        cursor = end
    return segments
