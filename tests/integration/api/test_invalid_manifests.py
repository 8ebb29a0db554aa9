"""The real API server refuses every invalid manifest of the table at `kubectl apply`,
with a message naming the field."""

from __future__ import annotations

from typing import Any


def test_the_api_server_refuses_the_manifest_naming_the_field(runs: Any, invalid_case: Any) -> None:
    manifest = invalid_case.manifest
    if invalid_case.created_first is not None:
        # Each edit case gets its own object, created valid first.
        name = "edit-" + invalid_case.id.split()[0]
        invalid_case.created_first["metadata"]["name"] = name
        manifest["metadata"]["name"] = name
        created = runs.apply(invalid_case.created_first)
        assert created.returncode == 0, created.stderr

    result = runs.apply(manifest)

    assert result.returncode != 0, f"accepted: {result.stdout}"
    assert invalid_case.field in result.stderr, result.stderr
    assert invalid_case.says in result.stderr, result.stderr
