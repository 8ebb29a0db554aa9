"""Turn raw DFlashRun dicts into models, or into one message per mistake that names the
field, the value and what is accepted (never a traceback).

The API server already enforces the same rules (the CRD is generated from these models);
this is the operator's second line of defence and the offline linter's first.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from dflash_operator.api.base import RULE_ERROR
from dflash_operator.api.naming import check_run_name
from dflash_operator.api.resource import DFlashRun
from dflash_operator.api.spec import DFlashRunSpec

# Long values are cut in messages: the point is to recognise them, not to echo a template.
MAX_SHOWN_VALUE = 80


class SpecError(ValueError):
    """A DFlashRun that cannot be run; `problems` holds one line per mistake."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("; ".join(problems))


def _path(root: str, loc: tuple[int | str, ...], field_path: str = "") -> str:
    out = root
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return (out + field_path).lstrip(".")


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= MAX_SHOWN_VALUE else text[: MAX_SHOWN_VALUE - 3] + "..."


def describe_errors(error: ValidationError, root: str) -> list[str]:
    """One line per pydantic error: `<path>: <value> is not accepted: <what is>`."""
    problems = []
    for item in error.errors(include_url=False):
        ctx = item.get("ctx") or {}
        # `loc` holds aliases here; the internal function-wrapper parts are dropped.
        loc = tuple(part for part in item["loc"] if not str(part).startswith("function-"))
        if item["type"] == RULE_ERROR:
            problems.append(f"{_path(root, loc, ctx.get('field_path', ''))}: {ctx['message']}")
        elif item["type"] == "extra_forbidden":
            problems.append(
                f"{_path(root, loc)}: unknown field; remove it (see docs/crd-reference.md)"
            )
        elif item["type"] == "missing":
            problems.append(f"{_path(root, loc)}: required field is missing")
        else:
            shown = _shown(item.get("input"))
            problems.append(f"{_path(root, loc)}: {shown} is not accepted: {item['msg']}")
    return problems


def _as_json(raw: Any) -> str:
    """Validate as JSON, strictly, to accept exactly what the API server accepts: "yes" is
    not a boolean and "8" is not an integer (pydantic's lax mode would convert both).
    """
    return json.dumps(raw, default=str)


def parse_spec(raw: Any) -> DFlashRunSpec:
    """Validate `spec` (a dict, as read from the API server or a YAML file)."""
    try:
        return DFlashRunSpec.model_validate_json(_as_json(raw), strict=True)
    except ValidationError as error:
        raise SpecError(describe_errors(error, "spec")) from None


def parse_run(raw: Any) -> DFlashRun:
    """Validate a whole DFlashRun object, including the length and form of its name."""
    try:
        run = DFlashRun.model_validate_json(_as_json(raw), strict=True)
    except ValidationError as error:
        raise SpecError(describe_errors(error, "")) from None
    problem = check_run_name(run.metadata.name)
    if problem:
        raise SpecError([problem])
    return run
