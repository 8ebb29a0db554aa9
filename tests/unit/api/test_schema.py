"""The CRD schema generated from the models is structural, documented and agrees with them."""

from __future__ import annotations

from typing import Any

import pytest
from dflash_operator.api.base import CEL_KEY, ApiModel
from dflash_operator.api.crd import PRINTER_COLUMNS, build_crd, build_root_schema
from dflash_operator.api.schema import SchemaError, build_openapi_schema, iter_fields
from dflash_operator.api.spec import DFlashRunSpec
from dflash_operator.api.status import DFlashRunStatus
from pydantic import BaseModel

ROOT = build_root_schema()
SPEC = ROOT["properties"]["spec"]
STATUS = ROOT["properties"]["status"]


def _all_nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    return [(path or "<root>", node), *iter_fields(node, path)]


def test_every_spec_and_status_field_has_a_description() -> None:
    missing = [
        path
        for path, node in iter_fields(SPEC, "spec") + iter_fields(STATUS, "status")
        if not path.endswith(("[]", ".*")) and not node.get("description")
    ]
    assert missing == []


def test_every_node_has_a_type_so_the_schema_is_structural() -> None:
    untyped = [
        path
        for path, node in _all_nodes(ROOT)
        if "type" not in node and not node.get("x-kubernetes-int-or-string")
    ]
    assert untyped == []


def test_nothing_preserves_unknown_fields_so_the_server_rejects_them() -> None:
    preserving = [p for p, n in _all_nodes(ROOT) if n.get("x-kubernetes-preserve-unknown-fields")]
    assert preserving == []


def test_no_key_outside_what_a_crd_accepts_is_left() -> None:
    leftovers = [
        (path, key)
        for path, node in _all_nodes(ROOT)
        for key in node
        if key in {"title", "$ref", "$defs", "const", "uniqueItems"} or key.startswith("x-dflash")
    ]
    assert leftovers == []


def test_exclusive_bounds_use_the_openapi_3_0_boolean_form() -> None:
    rate = SPEC["properties"]["training"]["properties"]["learningRate"]
    assert rate["minimum"] == 0 and rate["exclusiveMinimum"] is True


def _defaults_of(schema: dict[str, Any]) -> dict[str, Any]:
    """What the API server fills into `{}` for this object, recursively."""
    out: dict[str, Any] = {}
    for name, node in schema.get("properties", {}).items():
        if "default" in node:
            value = node["default"]
            out[name] = {**_defaults_of(node), **value} if isinstance(value, dict) else value
    return out


def test_server_side_defaults_equal_the_model_defaults() -> None:
    minimal: dict[str, Any] = {
        "target": {"model": "Qwen/Qwen3-8B"},
        "data": {"sources": [{"name": "a", "uri": "s3://bucket/a.jsonl", "format": "alpaca"}]},
        "storage": {"bucket": "bucket"},
    }
    from_models = DFlashRunSpec.model_validate(minimal).to_api()
    from_schema = {**_defaults_of(SPEC), **minimal}
    for section in ("target", "storage"):
        from_schema[section] = {**_defaults_of(SPEC["properties"][section]), **minimal[section]}
    from_schema["data"]["sources"][0] = {
        **_defaults_of(SPEC["properties"]["data"]["properties"]["sources"]["items"]),
        **minimal["data"]["sources"][0],
    }
    assert from_schema == from_models


def _rules_in_models() -> int:
    count = 0
    seen: set[type[BaseModel]] = set()
    stack: list[type[BaseModel]] = [DFlashRunSpec]
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        count += len(model.__dict__.get("rules", ()))
        for field in model.model_fields.values():
            for arg in _classes_in(field.annotation):
                if issubclass(arg, ApiModel):
                    stack.append(arg)
    return count


def _classes_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type):
        return [annotation]
    return [c for arg in getattr(annotation, "__args__", ()) for c in _classes_in(arg)]


def test_every_object_rule_of_the_models_reaches_the_crd() -> None:
    object_rules = sum(
        1
        for _, node in _all_nodes(SPEC)
        if node.get("type") == "object" and "properties" in node
        for rule in node.get(CEL_KEY, [])
        if rule["rule"] != "self == oldSelf"
    )
    assert object_rules == _rules_in_models()


def test_target_drafter_data_and_the_storage_location_are_immutable_and_nothing_else_is() -> None:
    immutable = sorted(
        name
        for name, node in SPEC["properties"].items()
        if any(rule["rule"] == "self == oldSelf" for rule in node.get(CEL_KEY, []))
    )
    assert immutable == ["data", "drafter", "target"]
    storage = SPEC["properties"]["storage"]["properties"]
    moved = sorted(
        name
        for name, node in storage.items()
        if any(rule["rule"] == "self == oldSelf" for rule in node.get(CEL_KEY, []))
    )
    assert moved == ["bucket", "endpoint", "prefix"]  # the location; not credentials or policy


def test_the_crd_has_the_identity_the_issue_asks_for() -> None:
    crd = build_crd()
    names = crd["spec"]["names"]
    assert crd["metadata"]["name"] == "dflashruns.dflash.dev"
    assert (names["kind"], names["plural"], names["shortNames"], names["categories"]) == (
        "DFlashRun",
        "dflashruns",
        ["dfr"],
        ["dflash"],
    )
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["scope"] == "Namespaced"
    assert (version["name"], version["subresources"]) == ("v1alpha1", {"status": {}})


def test_printer_columns_read_fields_that_exist_in_the_schema() -> None:
    paths = {f".{path}" for path, _ in iter_fields(ROOT)}
    paths.add(".metadata.creationTimestamp")
    for column in PRINTER_COLUMNS:
        assert column["jsonPath"] in paths, column


def test_a_union_of_two_models_cannot_be_expressed_and_says_where() -> None:
    class A(ApiModel):
        x: int

    class B(ApiModel):
        y: int

    class Both(ApiModel):
        either: A | B

    with pytest.raises(SchemaError, match="either"):
        build_openapi_schema(Both)


def test_status_lists_are_maps_keyed_like_kubernetes_conditions() -> None:
    conditions = STATUS["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert build_openapi_schema(DFlashRunStatus) == STATUS
