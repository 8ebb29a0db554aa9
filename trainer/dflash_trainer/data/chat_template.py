"""Render a target's Jinja chat template exactly as transformers does, but compiled once and fast.

Both regeneration (the prompt the target sees) and tokenization (prompt vs. full conversation)
render through this one class, so the two stages can never disagree on the prompt text.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from dflash_trainer.data.errors import BadInputError


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Same as transformers: Jinja's own tojson escapes HTML characters, templates expect raw JSON.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now(UTC).strftime(fmt)


_DICT_ATTRIBUTES = frozenset(dir(dict))


class _CachedSandbox(ImmutableSandboxedEnvironment):
    """The transformers sandbox, with its per-access safety verdict cached.

    The verdict depends only on the object's type and the attribute name, and a chat template
    asks the same few questions (`str.startswith`, `str.split`, ...) thousands of times; the
    uncached checks were a third of tokenization time (measured).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._verdicts: dict[tuple[type, str], bool] = {}

    def getattr(self, obj: Any, attribute: str) -> Any:
        # `message.role` on a dict: Jinja first tries the Python attribute, fails with an
        # exception, then indexes. For names that are not dict attributes the outcome is the
        # item lookup either way, so do it first.
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES and attribute in obj:
            return obj[attribute]
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        key = (type(obj), attr)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = super().is_safe_attribute(obj, attr, value)
            self._verdicts[key] = verdict
        return verdict


class ChatTemplate:
    """A compiled chat template plus the special-token variables templates may read."""

    def __init__(self, source: str, special_tokens: dict[str, str] | None = None) -> None:
        env = _CachedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise BadInputError(
                f"chat template: syntax error on line {exc.lineno}: {exc.message}"
            ) from None
        self.source = source
        self._special = dict(special_tokens or {})

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, override: str | None = None) -> ChatTemplate:
        source = override if override is not None else getattr(tokenizer, "chat_template", None)
        if isinstance(source, dict):
            source = source.get("default")
        if not isinstance(source, str) or not source:
            raise BadInputError(
                "the target tokenizer has no chat template; pass --chat-template FILE "
                "(a Jinja file such as the model's chat_template.jinja)"
            )
        special = {
            name: str(value)
            for name, value in getattr(tokenizer, "special_tokens_map", {}).items()
            if isinstance(value, str)
        }
        return cls(source, special)

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        enable_thinking: bool = True,
    ) -> str:
        """The template's text for `messages` (raises jinja2.TemplateError on template errors)."""
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            enable_thinking=enable_thinking,
            **self._special,
        )
