"""kubectl's JSONPath templates (`-o jsonpath=...`), the subset `kubectl get` users write:
text with `{expressions}`, `{range ...}{end}` loops and `{"literals"}`. Parsing is separate
from evaluation so a bad template is refused before the API is called. Pure; no I/O.

Accepted inside `{}` (as in k8s.io/client-go/util/jsonpath):
  `$`  `.field`  `['field']`  `..field`  `*`  `[n]`  `[-n]`  `[a:b]`  `[a:b:step]`  `[n,m]`
  `[?(@.path)]`  `[?(@.path OP literal)]` with OP one of == != < <= > >=
  `range EXPR` ... `end`, and a quoted literal like `{"\\n"}` or `{'\\t'}`.
Field names may carry escaped dots: `{.metadata.annotations.dflash\\.dev/retry}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ACCEPTED = (
    "text with {.field}, {.a.b[0]}, {.items[*].metadata.name}, {..name}, {[1:3]}, "
    '{[?(@.status.phase=="Failed")]}, {range .items[*]}...{end}, {"\\n"}'
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}
_OPERATORS = ("==", "!=", "<=", ">=", "<", ">")
_NUMBER = re.compile(r"-?\d+(\.\d+)?$")
_MISSING = object()


class JsonPathError(ValueError):
    """A template that cannot be parsed: the message says where and what was expected."""


# --- the parsed form ---------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Wildcard:
    pass


@dataclass(frozen=True)
class Recursive:
    """`..name` (or `..*`): every value named so, at any depth below."""

    name: str | None


@dataclass(frozen=True)
class Indexes:
    values: tuple[int, ...]


@dataclass(frozen=True)
class Slice:
    start: int | None
    end: int | None
    step: int | None


@dataclass(frozen=True)
class Filter:
    path: tuple[Step, ...]
    operator: str | None
    literal: Any


Step = Field | Wildcard | Recursive | Indexes | Slice | Filter


@dataclass(frozen=True)
class Text:
    value: str


@dataclass(frozen=True)
class Expression:
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Range:
    over: Expression
    body: tuple[Node, ...]


Node = Text | Expression | Range


@dataclass(frozen=True)
class Template:
    source: str
    nodes: tuple[Node, ...]

    def render(self, data: Any) -> str:
        return "".join(_render(node, data) for node in self.nodes)


# --- parsing -----------------------------------------------------------------------------
def _unquoted(text: str, start: int) -> Iterator[tuple[int, str]]:
    """(index, char) of `text` from `start`, skipping quoted literals ('...' or "...", with
    backslash escapes): brackets and braces inside them do not count."""
    index, quote = start, None
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        else:
            yield index, char
        index += 1


def _actions(source: str) -> list[tuple[str, str]]:
    """('text', ...) and ('action', ...) pieces; braces inside quoted literals do not count."""
    pieces: list[tuple[str, str]] = []
    position = 0
    while position < len(source):
        start = source.find("{", position)
        if start < 0:
            pieces.append(("text", source[position:]))
            break
        if start > position:
            pieces.append(("text", source[position:start]))
        end = next((i for i, char in _unquoted(source, start + 1) if char == "}"), None)
        if end is None:
            raise JsonPathError(f"unclosed action: no '}}' after position {start}")
        pieces.append(("action", source[start + 1 : end].strip()))
        position = end + 1
    return pieces


def _literal_string(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def _literal(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return _literal_string(text)
    if _NUMBER.match(text):
        return float(text) if "." in text else int(text)
    if text in ("true", "false"):
        return text == "true"
    raise JsonPathError(f"filter value {text!r} is not a quoted string, a number or true/false")


def _closing_bracket(text: str, start: int) -> int:
    depth = 0
    for index, char in _unquoted(text, start):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return index
    raise JsonPathError(f"unclosed '[' in {text!r}")


def _int(text: str, what: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not re.fullmatch(r"-?\d+", text):
        raise JsonPathError(f"{what} {text!r} is not an integer")
    return int(text)


def _bracket(inner: str) -> Step:
    inner = inner.strip()
    if inner == "*":
        return Wildcard()
    if inner.startswith("?(") and inner.endswith(")"):
        return _filter(inner[2:-1].strip())
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "\"'":
        return Field(_literal_string(inner))
    if ":" in inner:
        parts = inner.split(":")
        if len(parts) > 3:
            raise JsonPathError(f"slice [{inner}] has more than start:end:step")
        start, end, step = [*parts, ""][:3]
        return Slice(_int(start, "slice start"), _int(end, "slice end"), _int(step, "slice step"))
    values = tuple(_int(part, "index") for part in inner.split(","))
    if not values or any(value is None for value in values):
        raise JsonPathError(f"[{inner}] is not an index, a slice, * or a ?(filter)")
    return Indexes(tuple(value for value in values if value is not None))


def _filter(condition: str) -> Filter:
    for operator in _OPERATORS:
        left, found, right = condition.partition(operator)
        if found:
            return Filter(_path_after_at(left.strip()), operator, _literal(right))
    return Filter(_path_after_at(condition), None, None)


def _path_after_at(text: str) -> tuple[Step, ...]:
    if not text.startswith("@"):
        raise JsonPathError(f"a filter starts with @ (the current element), not {text!r}")
    return _steps(text[1:])


def _field_name(text: str, start: int) -> tuple[str, int]:
    """A field name up to the next unescaped '.' or '['; `\\.` is a dot in the name."""
    name, index = [], start
    while index < len(text) and text[index] not in ".[":
        if text[index] == "\\" and index + 1 < len(text):
            index += 1
        name.append(text[index])
        index += 1
    return "".join(name), index


def _steps(text: str) -> tuple[Step, ...]:
    steps: list[Step] = []
    index = 1 if text.startswith("$") else 0
    while index < len(text):
        char = text[index]
        if text.startswith("..", index):
            name, index = _field_name(text, index + 2)
            if not name:
                raise JsonPathError(f"'..' needs a field name or * after it in {text!r}")
            steps.append(Recursive(None if name == "*" else name))
        elif char == ".":
            name, index = _field_name(text, index + 1)
            if name:  # a lone '.' is the current object, as in {.}
                steps.append(Wildcard() if name == "*" else Field(name))
        elif char == "[":
            end = _closing_bracket(text, index)
            steps.append(_bracket(text[index + 1 : end]))
            index = end + 1
        elif index == 0:
            name, index = _field_name(text, 0)
            steps.append(Field(name))
        else:
            raise JsonPathError(f"unexpected {char!r} at position {index} of {text!r}")
    return tuple(steps)


def _expression(action: str) -> Expression:
    if not action:
        raise JsonPathError("empty action {}")
    return Expression(_steps(action))


def _nodes(pieces: list[tuple[str, str]], position: int, in_range: bool) -> tuple[list[Node], int]:
    nodes: list[Node] = []
    while position < len(pieces):
        kind, value = pieces[position]
        position += 1
        if kind == "text":
            nodes.append(Text(value))
        elif value == "end":
            if not in_range:
                raise JsonPathError("{end} without a {range ...} before it")
            return nodes, position
        elif value.startswith("range ") or value == "range":
            over = _expression(value.removeprefix("range").strip())
            body, position = _nodes(pieces, position, in_range=True)
            nodes.append(Range(over, tuple(body)))
        elif len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            nodes.append(Text(_literal_string(value)))
        else:
            nodes.append(_expression(value))
    if in_range:
        raise JsonPathError("{range ...} without its {end}")
    return nodes, position


def parse_template(source: str) -> Template:
    """The parsed template; JsonPathError names what is wrong (the caller names the template)."""
    nodes, _ = _nodes(_actions(source), 0, in_range=False)
    return Template(source, tuple(nodes))


# --- evaluation --------------------------------------------------------------------------
def _children(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    return []


def _descendants(value: Any) -> list[Any]:
    found = [value]
    for child in _children(value):
        found += _descendants(child)
    return found


def _compare(left: Any, operator: str, right: Any) -> bool:
    if isinstance(left, bool) != isinstance(right, bool):
        return operator == "!="
    if isinstance(right, (int, float)) and not isinstance(left, (int, float)):
        return operator == "!="
    if isinstance(right, str) and not isinstance(left, str):
        return operator == "!="
    try:
        return bool(
            {
                "==": lambda: left == right,
                "!=": lambda: left != right,
                "<": lambda: left < right,
                "<=": lambda: left <= right,
                ">": lambda: left > right,
                ">=": lambda: left >= right,
            }[operator]()
        )
    except TypeError:
        return False


def _matches(item: Any, condition: Filter) -> bool:
    values = evaluate(condition.path, item)
    if condition.operator is None:
        return bool(values)
    return any(_compare(value, condition.operator, condition.literal) for value in values)


def _apply(step: Step, value: Any) -> list[Any]:
    if isinstance(step, Field):
        if isinstance(value, dict) and step.name in value:
            return [value[step.name]]
        return []
    if isinstance(step, Wildcard):
        return _children(value)
    if isinstance(step, Recursive):
        below = [d for child in _children(value) for d in _descendants(child)]
        if step.name is None:
            return below
        return [d[step.name] for d in [value, *below] if isinstance(d, dict) and step.name in d]
    if not isinstance(value, list):
        return []
    if isinstance(step, Indexes):
        return [value[i] for i in step.values if -len(value) <= i < len(value)]
    if isinstance(step, Slice):
        return value[step.start : step.end : step.step or None]
    return [item for item in value if _matches(item, step)]


def evaluate(steps: tuple[Step, ...], data: Any) -> list[Any]:
    values = [data]
    for step in steps:
        values = [result for value in values for result in _apply(step, value)]
    return values


def format_value(value: Any) -> str:
    """As kubectl prints a result: strings bare, objects and lists as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _render(node: Node, data: Any) -> str:
    if isinstance(node, Text):
        return node.value
    if isinstance(node, Expression):
        return " ".join(format_value(value) for value in evaluate(node.steps, data))
    return "".join(
        _render(child, item) for item in evaluate(node.over.steps, data) for child in node.body
    )
