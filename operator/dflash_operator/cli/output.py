"""`-o/--output` of `status` and `list`, with kubectl's vocabulary: wide, name, json, yaml and
jsonpath=TEMPLATE. Parses and checks the flag's value (a bad one is a usage error naming it and
what is accepted) and builds the name and jsonpath views; tables live in `render.py`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dflash_operator.api.constants import GROUP, PLURAL, VERSION
from dflash_operator.cli.jsonpath import JsonPathError, Template, parse_template

# kubectl's resource/name form: `kubectl get dfr -o name` prints the same.
RESOURCE = f"{PLURAL.removesuffix('s')}.{GROUP}"
JSONPATH_PREFIXES = ("jsonpath=", "jsonpath:")


class Format(StrEnum):
    WIDE = "wide"
    NAME = "name"
    JSON = "json"
    YAML = "yaml"
    JSONPATH = "jsonpath"


ACCEPTED_FORMATS = "wide, name, json, yaml, jsonpath=TEMPLATE"


@dataclass(frozen=True)
class Output:
    format: Format
    template: Template | None = None


def parse_output(value: str) -> Output:
    """The `-o` value as argparse's type: ArgumentTypeError names it and what is accepted."""
    for prefix in JSONPATH_PREFIXES:
        if value.startswith(prefix):
            source = value.removeprefix(prefix)
            try:
                return Output(Format.JSONPATH, parse_template(source))
            except JsonPathError as exc:
                raise argparse.ArgumentTypeError(
                    f"bad jsonpath template {source!r}: {exc}. Accepted: kubectl's JSONPath, "
                    "e.g. jsonpath='{.status.phase}' or "
                    "jsonpath='{range .items[*]}{.metadata.name}{\"\\n\"}{end}'"
                ) from exc
    if value == Format.JSONPATH.value:
        raise argparse.ArgumentTypeError("jsonpath needs a template: -o jsonpath='{.status.phase}'")
    try:
        chosen = Format(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown output format {value!r}; accepted: {ACCEPTED_FORMATS}"
        ) from None
    return Output(chosen)


def resource_name(run: dict[str, Any]) -> str:
    return f"{RESOURCE}/{(run.get('metadata') or {}).get('name', '')}"


def as_list(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What `kubectl get dfr -o jsonpath` evaluates for several runs: a v1 List."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": runs,
        "metadata": {"resourceVersion": ""},
    }


def with_kind(run: dict[str, Any]) -> dict[str, Any]:
    """A run as `kubectl get` shows it: the API server's list items lack apiVersion/kind."""
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DFlashRun", **run}


def render_jsonpath(template: Template, data: Any) -> str:
    """kubectl prints the template's text without adding a newline; neither do we."""
    return template.render(data)
