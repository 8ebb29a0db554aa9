"""Loads invalid_manifests.yaml: each case's manifest(s) built from the shared valid base."""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TABLE = Path(__file__).with_name("invalid_manifests.yaml")
# One path segment: a quoted key ("nvidia.com/gpu"), or a plain key with optional [i] indexes.
_SEGMENT = re.compile(r'"([^"]+)"|([^.\[\]]+)|\[(\d+)\]')


@dataclass(frozen=True)
class Case:
    id: str
    field: str
    says: str
    python_field: str
    server_only: bool
    manifest: dict[str, Any]
    # For edits after creation: the manifest to create first (then `manifest` is applied).
    created_first: dict[str, Any] | None = None


def _parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for quoted, plain, index in _SEGMENT.findall(path):
        parts.append(int(index) if index else (quoted or plain))
    return parts


def set_path(obj: Any, path: str, value: Any) -> None:
    """Set `path` in `obj`, creating maps on the way; an index one past a list appends."""
    parts = _parts(path)
    for here, nxt in itertools.pairwise(parts):
        if isinstance(here, int):
            obj = obj[here]
        else:
            obj = obj.setdefault(here, [] if isinstance(nxt, int) else {})
    last = parts[-1]
    if isinstance(last, int) and last == len(obj):
        obj.append(value)
    else:
        obj[last] = value


def delete_path(obj: Any, path: str) -> None:
    parts = _parts(path)
    for here in parts[:-1]:
        obj = obj[here]
    del obj[parts[-1]]


def base_manifest() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(TABLE.read_text())["base"])


def load_cases() -> list[Case]:
    table = yaml.safe_load(TABLE.read_text())
    cases = []
    for raw in table["cases"]:
        manifest = copy.deepcopy(table["base"])
        for path, value in (raw.get("set") or raw.get("update") or {}).items():
            set_path(manifest, path, value)
        for path in raw.get("delete", []):
            delete_path(manifest, path)
        cases.append(
            Case(
                id=raw["id"],
                field=raw["field"],
                says=raw["says"],
                python_field=raw.get("python_field", raw["field"]),
                server_only=bool(raw.get("server_only")),
                manifest=manifest,
                created_first=copy.deepcopy(table["base"]) if "update" in raw else None,
            )
        )
    return cases
