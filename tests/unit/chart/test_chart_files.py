"""The chart's files agree with each other and with the operator, without helm or a cluster:
a comment on every value, a schema that refuses unknown keys everywhere and knows every value,
pools shaped like the operator's pool model, env the operator reads, images it defaults to,
the CRD it generates, and one kind of object per template."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from dflash_operator import config
from dflash_operator.api.generate import CHART_CRD_PATH, CRD_PATH, render_crd
from dflash_operator.pools import NodePool, StageDefaults, Toleration, parse_pools

ROOT = Path(__file__).parents[3]
CHART = ROOT / "charts" / "dflash-operator"
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
# Kubernetes types the chart copies as they are (their own schema is the API server's).
FREE_FORM = {
    "/properties/global",
    "/$defs/affinity/properties/nodeAffinity",
    "/$defs/affinity/properties/podAffinity",
    "/$defs/affinity/properties/podAntiAffinity",
    "/$defs/envVar/properties/valueFrom",
    "/$defs/volume",
    "/properties/podSecurityContext/properties/seLinuxOptions",
    "/properties/securityContext/properties/seLinuxOptions",
}
KEY_LINE = re.compile(r"^(\s*)(- )?[\"']?([A-Za-z0-9_.\-/]+)[\"']?:")


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow `$ref` (and the object branch of `anyOf`) to the schema of a value."""
    while True:
        if "$ref" in node:
            target: Any = SCHEMA
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        elif "anyOf" in node:
            node = next(n for n in node["anyOf"] if n.get("type") != "null")
        else:
            return node


def schema_nodes(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.append((path, node))
        for key, value in node.items():
            found += schema_nodes(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += schema_nodes(value, f"{path}/{index}")
    return found


def schema_at(path: list[str]) -> dict[str, Any]:
    node = SCHEMA
    for key in path:
        node = resolve(node)
        node = node.get("properties", {}).get(key) or node.get("additionalProperties") or {}
    return resolve(node)


def is_map(node: dict[str, Any]) -> bool:
    return "properties" not in node and isinstance(node.get("additionalProperties"), dict)


def test_every_value_in_values_yaml_has_a_comment() -> None:
    """Each key has a comment above it or beside it; entries of a map (a nodeSelector's labels)
    are described by the map's own comment."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    stack: list[tuple[int, str]] = []
    uncommented = []
    for number, line in enumerate(lines):
        match = KEY_LINE.match(line)
        if not match or match.group(2):  # list items are described by their key
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = [key for _indent, key in stack]
        stack.append((indent, match.group(3)))
        if is_map(schema_at(parent)) and parent != ["nodePools"]:
            continue
        previous = next((p.strip() for p in reversed(lines[:number]) if p.strip()), "")
        if not previous.startswith("#") and "#" not in line:
            uncommented.append(f"line {number + 1}: {line.strip()}")
    assert uncommented == []


def test_every_object_of_the_schema_refuses_unknown_keys_or_types_its_map_values() -> None:
    loose = []
    for path, node in schema_nodes(SCHEMA):
        if path in FREE_FORM:
            continue
        extra = node.get("additionalProperties")
        if "properties" in node and extra is not False:
            loose.append(f"{path}: objects with properties need additionalProperties: false")
        elif "properties" not in node and not isinstance(extra, dict):
            loose.append(f"{path}: a map needs a schema for its values")
    assert loose == []


def check_known(value: Any, node: dict[str, Any], path: str, unknown: list[str]) -> None:
    node = resolve(node)
    if isinstance(value, dict):
        for key, item in value.items():
            if key in node.get("properties", {}):
                check_known(item, node["properties"][key], f"{path}.{key}", unknown)
            elif isinstance(node.get("additionalProperties"), dict):
                check_known(item, node["additionalProperties"], f"{path}.{key}", unknown)
            elif f"{path}.{key}".lstrip(".") not in ("global",):
                unknown.append(f"{path}.{key}".lstrip("."))
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        for index, item in enumerate(value):
            check_known(item, node["items"], f"{path}[{index}]", unknown)


def test_every_default_value_is_known_to_the_schema() -> None:
    unknown: list[str] = []
    check_known(VALUES, SCHEMA, "", unknown)
    assert unknown == []


def test_every_top_level_value_of_the_schema_has_a_default_in_values_yaml() -> None:
    assert set(SCHEMA["properties"]) - {"global"} == set(VALUES)


def aliases(model: Any) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def test_a_node_pool_in_the_schema_has_exactly_the_keys_of_the_operators_pool_model() -> None:
    pool = SCHEMA["$defs"]["nodePool"]["properties"]
    assert set(pool) == aliases(NodePool)
    assert set(SCHEMA["$defs"]["toleration"]["properties"]) == aliases(Toleration)
    assert set(SCHEMA["properties"]["defaultPools"]["properties"]) == aliases(StageDefaults)


def test_the_default_pools_are_those_of_the_design_and_the_operator_accepts_them() -> None:
    assert list(VALUES["nodePools"]) == ["b200", "rtx-pro-6000", "cpu"]
    assert VALUES["nodePools"]["b200"]["gpusPerNode"] == 8
    assert VALUES["nodePools"]["rtx-pro-6000"]["gpusPerNode"] == 4
    defaults = {stage: pool for stage, pool in VALUES["defaultPools"].items() if pool}
    pools = parse_pools({"nodePools": VALUES["nodePools"], "defaults": defaults}, "values.yaml")
    assert pools.defaults.regeneration == "b200" and pools.defaults.training == "rtx-pro-6000"


def test_every_variable_the_deployment_sets_is_a_setting_the_operator_reads() -> None:
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    names = set(re.findall(r"name: (DFLASH_[A-Z_]+)", deployment))
    settings = {config.ENV_PREFIX + name.upper() for name in config.OperatorConfig.model_fields}
    assert names and names <= settings, names - settings
    assert {"DFLASH_POOLS_FILE", "DFLASH_NAMESPACES", "DFLASH_REGEN_IMAGE"} <= names


def test_the_default_stage_images_are_the_operators_defaults() -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    images = VALUES["stageImages"]
    assert f"{images['regen']['repository']}:{app_version}" == config.DEFAULT_REGEN_IMAGE
    assert f"{images['trainer']['repository']}:{app_version}" == config.DEFAULT_TRAINER_IMAGE
    assert images["runAsUser"] == config.DEFAULT_RUN_AS_USER
    assert str(config.DEFAULT_POOLS_FILE) in (CHART / "templates" / "deployment.yaml").read_text()


def test_the_charts_crd_is_byte_for_byte_the_generated_crd() -> None:
    chart_crd = (ROOT / CHART_CRD_PATH).read_bytes()
    assert chart_crd == (ROOT / CRD_PATH).read_bytes(), "run `make crds`"
    assert chart_crd.decode() == render_crd()
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == [CRD_PATH.name]


def test_every_template_holds_one_kind_of_object() -> None:
    for template in sorted((CHART / "templates").glob("*.yaml")):
        kinds = set(re.findall(r"^kind: (\w+)", template.read_text(), re.MULTILINE))
        assert len(kinds) == 1, (template.name, kinds)


def test_every_value_a_template_reads_exists_in_values_yaml() -> None:
    missing = set()
    for template in (CHART / "templates").iterdir():
        for path in re.findall(r"\.Values\.([A-Za-z0-9_.]+)", template.read_text()):
            node: Any = VALUES
            for part in path.split("."):
                if not isinstance(node, dict) or part not in node:
                    missing.add(f"{template.name}: .Values.{path}")
                    break
                node = node[part]
    assert missing == set()


def test_the_crd_is_kept_when_the_release_or_its_argo_application_goes() -> None:
    """Deleting the CRD would delete every run and its running Jobs and PyTorchJobs."""
    crd = yaml.safe_load((ROOT / CHART_CRD_PATH).read_text().split("---\n", 1)[1])
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)[^)]*\)")


def test_the_charts_readme_links_only_to_urls_or_files_packaged_with_the_chart() -> None:
    """The README is packaged (Artifact Hub, `helm show readme`): a link outside the chart
    (../../docs/...) would be dead there."""
    chart_dir = CHART.resolve()
    broken = []
    for target in MARKDOWN_LINK.findall((CHART / "README.md").read_text()):
        if re.match(r"^(https?|mailto):", target) or target.startswith("#"):
            continue
        path = (CHART / target.split("#")[0]).resolve()
        if not path.is_relative_to(chart_dir) or not path.exists():
            broken.append(target)
    assert broken == [], "link to https://github.com/dflash-dev/dflash-operator/blob/main/..."


def test_the_readme_link_check_can_fail() -> None:
    found = MARKDOWN_LINK.findall("see [helm](../../docs/helm.md) and [v](values.yaml 'x')")
    assert found == ["../../docs/helm.md", "values.yaml"]
