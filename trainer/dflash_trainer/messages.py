"""Shortening a stage's one-line message to the length its result keeps."""

from __future__ import annotations

CUT = " ... "


def shorten(text: str, limit: int) -> str:
    """`text` cut to `limit` characters in the middle: the start says what failed and the end
    says what to do, so both are kept."""
    if len(text) <= limit:
        return text
    if limit <= len(CUT):
        return text[:limit]
    tail = (limit - len(CUT)) // 2
    head = limit - len(CUT) - tail
    return text[:head] + CUT + text[len(text) - tail :]
