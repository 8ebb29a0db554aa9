"""After creation, suspend, audit thresholds and training settings stay editable."""

from __future__ import annotations

import copy
from typing import Any


def test_suspend_thresholds_and_training_can_be_edited_after_creation(
    runs: Any, base_manifest: dict[str, Any]
) -> None:
    manifest = base_manifest
    manifest["metadata"]["name"] = "editable"
    assert runs.apply(manifest).returncode == 0
    edited = copy.deepcopy(manifest)
    edited["spec"]["suspend"] = True
    edited["spec"]["audit"] = {"maxStubRate": 0.3, "tokens": {"maxNoAnchorRate": 0.2}}
    edited["spec"]["training"]["epochs"] = 3

    result = runs.apply(edited)

    assert result.returncode == 0, result.stderr
    stored = runs.get("editable")
    assert stored["spec"]["suspend"] is True
    assert stored["spec"]["audit"]["maxStubRate"] == 0.3
    assert stored["spec"]["audit"]["tokens"]["maxNoAnchorRate"] == 0.2
    assert stored["spec"]["training"]["epochs"] == 3
    assert stored["metadata"]["generation"] == 2


def test_reapplying_an_unchanged_run_is_not_an_edit(
    runs: Any, base_manifest: dict[str, Any]
) -> None:
    manifest = base_manifest
    manifest["metadata"]["name"] = "unchanged"
    assert runs.apply(manifest).returncode == 0

    result = runs.apply(manifest)

    assert result.returncode == 0, result.stderr
    assert runs.get("unchanged")["metadata"]["generation"] == 1
