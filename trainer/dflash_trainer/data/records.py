"""Normalized samples: chat messages, deterministic sample ids, and conversation validation.

Every source format is turned into these by `data.formats`; nothing here reads files.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]  # {"role": "system"|"user"|"assistant", "content": str, ...}
ROLES = ("system", "user", "assistant")
# Sample ids are the first 16 hex chars (64 bits) of a sha256: collisions are negligible below
# ~10^9 samples and the ids stay short in reports and Parquet.
ID_HEX_CHARS = 16
# Bits of the prompt hash used as the deduplication key (an int keeps the dedup set small).
DEDUP_KEY_BYTES = 8


class SampleError(ValueError):
    """A sample that cannot be used; `kind` is one of the ingestion issue kinds."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Completion:
    """An answer produced elsewhere (format `regenerated`), in the columns of contract section 3."""

    response: str
    reasoning: str | None
    output_token_ids: list[int] = field(default_factory=list)
    num_output_tokens: int | None = None
    # None when the source did not say: never assumed finished (the gates infer cut answers).
    finish_reason: str | None = None


@dataclass(frozen=True)
class PromptRecord:
    """One normalized sample. `messages` ends with a user turn (assistant turns are stripped
    when `all_turns`: each user turn then gets a regenerated answer, in order)."""

    id: str
    source: str
    messages: list[Message]
    all_turns: bool = False
    completion: Completion | None = None
    dedup_key: int = 0


def canonical_json(messages: list[Message]) -> str:
    """The canonical JSON of a message list: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def build_sample_id(source: str, messages: list[Message]) -> str:
    """Contract section 2: sha256 of the source name + canonical JSON of the prompt messages."""
    digest = hashlib.sha256(f"{source}\n{canonical_json(messages)}".encode())
    return digest.hexdigest()[:ID_HEX_CHARS]


def build_dedup_key(messages: list[Message]) -> int:
    """Source-independent key: the same prompt from two sources is one duplicate."""
    digest = hashlib.sha256(canonical_json(messages).encode()).digest()
    return int.from_bytes(digest[:DEDUP_KEY_BYTES], "big")


def check_content(message: Any, index: int) -> str:
    """The message's content as a string, or a `content_type` SampleError naming the index."""
    if not isinstance(message, dict):
        raise SampleError(
            "schema", f"message {index} is a {type(message).__name__}, expected an object"
        )
    content = message.get("content")
    if not isinstance(content, str):
        kind = "missing" if content is None else type(content).__name__
        raise SampleError(
            "content_type", f"content of message {index} is {kind}, expected a string"
        )
    return content


def check_conversation(messages: list[Message]) -> None:
    """Roles: optional system first, then user/assistant strictly alternating from a user."""
    if not messages:
        raise SampleError("empty_prompt", "no messages")
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role not in ROLES:
            raise SampleError(
                "role", f"message {i} has role {role!r}; accepted: {', '.join(ROLES)}"
            )
        if role == "system" and i != 0:
            raise SampleError("role", f"message {i} is a system message after the first message")
    turns = messages[1:] if messages[0]["role"] == "system" else messages
    if not turns:
        raise SampleError("empty_prompt", "only a system message, no user turn")
    for i, msg in enumerate(turns):
        expected = "user" if i % 2 == 0 else "assistant"
        if msg["role"] != expected:
            raise SampleError(
                "role",
                f"turn {i} has role {msg['role']!r} where {expected!r} was expected "
                "(user and assistant must alternate, starting with user)",
            )


def build_prompt_messages(messages: list[Message], all_turns: bool) -> list[Message]:
    """The prompt part: up to the first assistant turn, or every non-assistant turn."""
    out: list[Message] = []
    for msg in messages:
        if msg["role"] == "assistant":
            if not all_turns:
                break
            continue
        out.append({"role": msg["role"], "content": msg["content"]})
    if not any(m["role"] == "user" and m["content"].strip() for m in out):
        raise SampleError("empty_prompt", "the prompt has no non-empty user message")
    return out
