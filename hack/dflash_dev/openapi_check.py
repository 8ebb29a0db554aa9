"""An object against a CRD's structural OpenAPI v3 schema, without an API server: unknown
(silently pruned) fields, types, required fields, enums, bounds, patterns, list-map keys. Not
CEL: a server-side dry run checks that. For unit tests of what we render for others' CRDs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def crd_schema(path: Path, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of one served version of the CRD in `path`."""
    crd = yaml.safe_load(path.read_text())
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return dict(entry["schema"]["openAPIV3Schema"])
    raise KeyError(f"{path.name} has no version {version}")


def _type_ok(value: Any, schema: Mapping[str, Any]) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, int | str) and not isinstance(value, bool)
    expected = schema.get("type")
    if expected is None:
        return True
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    return isinstance(value, _TYPES[expected])


def _check_scalar(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: shorter than {schema['minLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: {value} > {schema['maximum']}")
    return errors


def _check_list(value: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    keys = schema.get("x-kubernetes-list-map-keys")
    if schema.get("x-kubernetes-list-type") == "map" and keys:
        seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
        if len(seen) != len(set(seen)):
            errors.append(f"{path}: duplicate list-map keys {keys}")
    for index, item in enumerate(value):
        errors += validate(item, schema.get("items") or {}, f"{path}[{index}]")
    return errors


def _check_object(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = [
        f"{path}.{name}: required" for name in schema.get("required") or () if name not in value
    ]
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        where = f"{path}.{name}"
        if properties is not None and name in properties:
            errors += validate(item, properties[name], where)
        elif isinstance(extra, Mapping):
            errors += validate(item, extra, where)
        elif properties is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{where}: unknown field (the API server would prune it)")
    return errors


def validate(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Every way `value` breaks `schema`, as 'path: what' lines (none: it fits)."""
    if value is None and schema.get("nullable"):
        return []
    if not _type_ok(value, schema):
        return [f"{path or '.'}: {type(value).__name__} where {schema.get('type')} is expected"]
    if isinstance(value, dict):
        return _check_object(value, schema, path)
    if isinstance(value, list):
        return _check_list(value, schema, path)
    return _check_scalar(value, schema, path)
