"""Pydantic JSON Schema -> Kubernetes structural OpenAPI v3 schema.

Inlines `$ref`s, turns `Optional[X]` into a non-required X, maps JSON Schema 2020-12
keywords to OpenAPI 3.0 (`exclusiveMinimum: 0` -> `minimum: 0, exclusiveMinimum: true`),
drops what a CRD refuses (`title`, `additionalProperties: false`, our `x-dflash-*` marks)
and checks the result is structural (every node has a type).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from dflash_operator.api.base import CEL_KEY

JsonObj = dict[str, Any]
# Keys a CRD schema may carry; anything else from pydantic is dropped or converted.
_KEPT = frozenset(
    {
        "type",
        "description",
        "default",
        "enum",
        "format",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "anyOf",
        "nullable",
        CEL_KEY,
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-preserve-unknown-fields",
    }
)


class SchemaError(ValueError):
    """A model that cannot be expressed as a structural schema; the message names the node."""


def build_openapi_schema(model: type[BaseModel], *, keep_marks: bool = False) -> JsonObj:
    """The structural schema of `model`. `keep_marks` keeps our `x-dflash-*` keys (for docs)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _convert(raw, defs, "<root>", keep_marks)


def _resolve(node: JsonObj, defs: JsonObj) -> JsonObj:
    """Inline a `$ref`; sibling keys (description, default, rules) win or are appended."""
    if "$ref" not in node:
        return node
    target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
    target = _resolve(target, defs)
    for key, value in node.items():
        if key == "$ref":
            continue
        if key == CEL_KEY:
            target[CEL_KEY] = [*value, *target.get(CEL_KEY, [])]
        else:
            target[key] = value
    return target


def _strip_null(node: JsonObj, defs: JsonObj) -> JsonObj:
    """`anyOf: [X, {type: null}]` -> X, keeping the outer description/default/rules."""
    options = node.get("anyOf")
    if not options:
        return node
    kept = [option for option in options if option.get("type") != "null"]
    if len(kept) == len(options):
        return node
    if len(kept) != 1:
        raise SchemaError(f"a union of several types is not structural: {options}")
    inner = _resolve(kept[0], defs)
    merged = {**inner, **{k: v for k, v in node.items() if k != "anyOf"}}
    if CEL_KEY in inner and CEL_KEY in node:
        merged[CEL_KEY] = [*inner[CEL_KEY], *node[CEL_KEY]]
    if merged.get("default", 0) is None:
        del merged["default"]
    return merged


def _convert(node: JsonObj, defs: JsonObj, where: str, keep_marks: bool) -> JsonObj:
    node = _strip_null(_resolve(node, defs), defs)
    out: JsonObj = {}
    for key, value in node.items():
        if key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out[key] = {
                name: _convert(child, defs, f"{where}.{name}", keep_marks)
                for name, child in value.items()
            }
        elif key == "items":
            out[key] = _convert(value, defs, f"{where}[]", keep_marks)
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = _convert(value, defs, f"{where}.*", keep_marks)
        elif key == "anyOf":
            if not node.get("x-kubernetes-int-or-string"):
                raise SchemaError(f"{where}: anyOf is only allowed for int-or-string")
            out[key] = value
        elif key == "uniqueItems":
            raise SchemaError(f"{where}: uniqueItems is not allowed in a CRD; use a list-type set")
        elif key in _KEPT or (keep_marks and key.startswith("x-dflash-")):
            out[key] = value
    if "type" not in out and not out.get("x-kubernetes-int-or-string"):
        raise SchemaError(f"{where}: every node of a structural schema needs a type: {node}")
    if out.get("type") == "object" and "required" in out and not out["required"]:
        del out["required"]
    return out


def iter_fields(schema: JsonObj, path: str = "") -> list[tuple[str, JsonObj]]:
    """Every (path, node) below `schema`, depth first; lists as `x[]`, maps as `x.*`."""
    found: list[tuple[str, JsonObj]] = []
    for name, child in schema.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        found.append((here, child))
        found.extend(iter_fields(child, here))
    if isinstance(schema.get("items"), dict):
        found.extend(iter_fields(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        found.extend(iter_fields(schema["additionalProperties"], f"{path}.*"))
    return found
