"""A container's environment, resolved as kubelet does: envFrom, then env in order, with
`$(VAR)` expansion; values from Secrets, ConfigMaps, the downward API and resource fields.

Missing references raise PodConfigError with kubelet's wording; nothing here talks to the
cluster directly (the lookups are passed in), so the rules are easy to test.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .errors import PodConfigError

Obj = dict[str, Any]
# name -> data (Secret values already base64-decoded), or None when the object does not exist.
Lookup = Callable[[str, str], dict[str, str] | None]
FIELD_WITH_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
# kubelet's expansion syntax: $(NAME) is replaced, $$ escapes a dollar, anything else stays.
EXPANSION = re.compile(r"\$\$|\$\(([^)]*)\)")


@dataclass(frozen=True)
class PodFacts:
    """What the downward API can expose about a pod that the pod object does not hold yet."""

    pod: Obj
    pod_ip: str
    host_ip: str
    node_allocatable: Mapping[str, str]


def expand(value: str, mapping: Mapping[str, str]) -> str:
    """Replace `$(NAME)` with mapping[NAME] (left as is when unknown); `$$` is a literal `$`."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return mapping[name] if name in mapping else match.group(0)

    return EXPANSION.sub(one, value)


def field_value(facts: PodFacts, field_path: str) -> str:
    """The value of a downward-API fieldRef (the paths kubelet supports for env and volumes)."""
    meta = facts.pod.get("metadata") or {}
    spec = facts.pod.get("spec") or {}
    keyed = FIELD_WITH_KEY.match(field_path)
    if keyed:
        return str((meta.get(keyed.group(1)) or {}).get(keyed.group(2), ""))
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": facts.host_ip,
        "status.hostIPs": facts.host_ip,
        "status.podIP": facts.pod_ip,
        "status.podIPs": facts.pod_ip,
    }
    if field_path in simple:
        return str(simple[field_path])
    if field_path in ("metadata.labels", "metadata.annotations"):
        items = meta.get(field_path.split(".")[1]) or {}
        return "\n".join(f'{k}="{_escape(v)}"' for k, v in sorted(items.items()))
    raise PodConfigError(
        f"fieldRef {field_path!r} is not supported; supported: {', '.join(sorted(simple))}, "
        "metadata.labels['<key>'], metadata.annotations['<key>']"
    )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def resource_value(facts: PodFacts, default_container: str, ref: Obj) -> str:
    """A resourceFieldRef: the container's limit/request divided by `divisor`, rounded up;
    an unset limit is the node's allocatable, as kubelet reports it."""
    name = ref.get("containerName") or default_container
    resource = str(ref.get("resource", ""))
    containers = (facts.pod.get("spec") or {}).get("containers") or []
    container = next((c for c in containers if c.get("name") == name), None)
    if container is None:
        raise PodConfigError(f"resourceFieldRef: no container named {name!r} in the pod")
    kind, _, res = resource.partition(".")
    if kind not in ("limits", "requests") or not res:
        raise PodConfigError(
            f"resourceFieldRef {resource!r}: expected limits.<resource> or requests.<resource>"
        )
    from kubernetes.utils.quantity import parse_quantity  # the kubernetes package is slow to import

    declared = ((container.get("resources") or {}).get(kind) or {}).get(res)
    if declared is None and kind == "requests":
        declared = ((container.get("resources") or {}).get("limits") or {}).get(res)
    if declared is None:
        declared = facts.node_allocatable.get(res, "0")
    value = parse_quantity(str(declared))
    divisor = parse_quantity(str(ref.get("divisor") or "1"))
    if divisor <= 0:
        raise PodConfigError(f"resourceFieldRef {resource!r}: divisor must be positive")
    return str(math.ceil(Decimal(value) / Decimal(divisor)))


def _from_object(kind: str, lookup: Lookup, namespace: str, ref: Obj, env_name: str) -> str | None:
    name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
    data = lookup(namespace, name)
    if data is None:
        if optional:
            return None
        raise PodConfigError(f'{kind.lower()} "{name}" not found (env {env_name})')
    if key not in data:
        if optional:
            return None
        raise PodConfigError(
            f"couldn't find key {key} in {kind} {namespace}/{name} (env {env_name})"
        )
    return data[key]


def resolve_env(
    facts: PodFacts, container: Obj, secrets: Lookup, config_maps: Lookup
) -> dict[str, str]:
    """The container's env, in kubelet's order: envFrom sources, then env (later wins)."""
    namespace = facts.pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key, lookup in (
            ("ConfigMap", "configMapRef", config_maps),
            ("Secret", "secretRef", secrets),
        ):
            ref = source.get(key)
            if ref is None:
                continue
            data = lookup(namespace, ref.get("name", ""))
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodConfigError(f'{kind.lower()} "{ref.get("name")}" not found (envFrom)')
            env.update({f"{prefix}{k}": v for k, v in data.items()})
    for var in container.get("env") or []:
        name = var["name"]
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        value: str | None
        if "secretKeyRef" in source:
            value = _from_object("Secret", secrets, namespace, source["secretKeyRef"], name)
        elif "configMapKeyRef" in source:
            value = _from_object(
                "ConfigMap", config_maps, namespace, source["configMapKeyRef"], name
            )
        elif "fieldRef" in source:
            value = field_value(facts, source["fieldRef"].get("fieldPath", ""))
        elif "resourceFieldRef" in source:
            value = resource_value(facts, container["name"], source["resourceFieldRef"])
        else:
            raise PodConfigError(
                f"env {name}: valueFrom {sorted(source)} is not supported; supported: "
                "secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef"
            )
        if value is not None:
            env[name] = value
    return env
