"""Turn one raw row of a source format into chat messages (and, for `regenerated`, a completion).

Formats: sharegpt, openai-messages, alpaca, prompt-only, regenerated (docs/data-pipeline.md).
"""

from __future__ import annotations

import json
from typing import Any

from dflash_trainer.data.records import (
    Completion,
    Message,
    SampleError,
    check_content,
    check_conversation,
)
from dflash_trainer.data.sources import SourceFormat

# ShareGPT dumps use many speaker names; these are the ones seen in public datasets.
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
FINISH_REASONS = ("stop", "length")
THINK_START = "<think>"
THINK_END = "</think>"


def normalize_row(
    value: dict[str, Any], fmt: SourceFormat
) -> tuple[list[Message], Completion | None]:
    """Messages (validated roles and string content) plus the completion of `regenerated` rows."""
    if fmt is SourceFormat.SHAREGPT:
        return _sharegpt(value), None
    if fmt is SourceFormat.OPENAI_MESSAGES:
        return _openai(value), None
    if fmt is SourceFormat.ALPACA:
        return _alpaca(value), None
    if fmt is SourceFormat.PROMPT_ONLY:
        return _prompt_only(value), None
    return _regenerated(value)


def _require(value: dict[str, Any], key: str, fmt: str) -> Any:
    if key not in value:
        keys = ", ".join(sorted(value)[:8]) or "none"
        raise SampleError("schema", f"no {key!r} field for format {fmt} (fields: {keys})")
    return value[key]


def _system_prefix(value: dict[str, Any]) -> list[Message]:
    system = value.get("system")
    if system is None or system == "":
        return []
    if not isinstance(system, str):
        raise SampleError("content_type", f"'system' is {type(system).__name__}, expected a string")
    return [{"role": "system", "content": system}]


def _sharegpt(value: dict[str, Any]) -> list[Message]:
    turns = _require(value, "conversations", "sharegpt")
    if not isinstance(turns, list):
        raise SampleError("schema", f"'conversations' is {type(turns).__name__}, expected a list")
    messages = _system_prefix(value)
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or "from" not in turn:
            raise SampleError("schema", f"conversations[{i}] has no 'from' field")
        speaker = str(turn["from"]).lower()
        if speaker not in SHAREGPT_ROLES:
            raise SampleError(
                "role",
                f"conversations[{i}].from is {turn['from']!r}; accepted: "
                + ", ".join(sorted(SHAREGPT_ROLES)),
            )
        content = check_content({"content": turn.get("value")}, i)
        messages.append({"role": SHAREGPT_ROLES[speaker], "content": content})
    check_conversation(messages)
    return messages


def _openai(value: dict[str, Any]) -> list[Message]:
    raw = _require(value, "messages", "openai-messages")
    if not isinstance(raw, list):
        raise SampleError("schema", f"'messages' is {type(raw).__name__}, expected a list")
    messages: list[Message] = []
    for i, msg in enumerate(raw):
        content = check_content(msg, i)
        out: Message = {"role": msg.get("role"), "content": content}
        reasoning = msg.get("reasoning_content")
        if isinstance(reasoning, str):
            out["reasoning_content"] = reasoning
        messages.append(out)
    check_conversation(messages)
    return messages


def _alpaca(value: dict[str, Any]) -> list[Message]:
    instruction = check_content({"content": _require(value, "instruction", "alpaca")}, 0)
    extra = value.get("input") or ""
    if not isinstance(extra, str):
        raise SampleError("content_type", f"'input' is {type(extra).__name__}, expected a string")
    prompt = f"{instruction}\n\n{extra}" if extra.strip() else instruction
    messages = [*_system_prefix(value), {"role": "user", "content": prompt}]
    check_conversation(messages)
    return messages


def _prompt_only(value: dict[str, Any]) -> list[Message]:
    prompt = check_content({"content": _require(value, "prompt", "prompt-only")}, 0)
    messages = [*_system_prefix(value), {"role": "user", "content": prompt}]
    check_conversation(messages)
    return messages


def split_thinking(text: str) -> tuple[str | None, str]:
    """(reasoning, answer) of a raw assistant text; reasoning is None when there is no think block.

    Handles both `<think>R</think>A` and the Qwen3.5 shape where the prompt opened the block
    and the text is `R</think>A`. An unterminated block is all reasoning and no answer.
    """
    if THINK_END in text:
        head, _, answer = text.partition(THINK_END)
        reasoning = head.split(THINK_START, 1)[1] if THINK_START in head else head
        return reasoning.strip("\n"), answer.lstrip("\n")
    if text.lstrip().startswith(THINK_START):
        return text.lstrip()[len(THINK_START) :].strip("\n"), ""
    return None, text


def _finish_reason(value: dict[str, Any]) -> str | None:
    finish = value.get("finish_reason")
    if finish is not None and finish not in FINISH_REASONS:
        raise SampleError(
            "schema",
            f"finish_reason {finish!r}; accepted: {', '.join(FINISH_REASONS)}, or no field "
            "(then a row at the generation limit counts as probably truncated)",
        )
    return finish if isinstance(finish, str) else None


def _regenerated(value: dict[str, Any]) -> tuple[list[Message], Completion]:
    if "messages" in value:
        messages = _openai(value)
        if messages[-1]["role"] != "assistant":
            raise SampleError("role", "the last message must be the assistant's answer")
        last = messages.pop()
        reasoning = last.get("reasoning_content")
        response = last["content"]
        if reasoning is None:
            reasoning, response = split_thinking(response)
        completion = Completion(
            response=response, reasoning=reasoning, finish_reason=_finish_reason(value)
        )
        return messages, completion
    prompt = _require(value, "prompt", "regenerated")
    if isinstance(prompt, str):
        try:
            prompt = json.loads(prompt)
        except json.JSONDecodeError:
            prompt = [{"role": "user", "content": prompt}]
    messages = _openai({"messages": prompt})
    response = check_content({"content": _require(value, "response", "regenerated")}, 0)
    reasoning = value.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, str):
        raise SampleError(
            "content_type", f"'reasoning' is {type(reasoning).__name__}, expected a string"
        )
    finish = _finish_reason(value)
    ids = value.get("output_token_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise SampleError("schema", "output_token_ids must be a list of integers")
    count = value.get("num_output_tokens")
    completion = Completion(
        response=response,
        reasoning=reasoning,
        output_token_ids=ids,
        num_output_tokens=int(count) if isinstance(count, int) else (len(ids) or None),
        finish_reason=finish,
    )
    return messages, completion
